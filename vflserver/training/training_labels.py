"""The labels the active party trains one job on (randomised with label DP), its noise key, and what it reports.

The job's ``[privacy]`` says how the labels are protected (``vflcore.job.privacy``); this party applies
it, in its own process, before training starts:

- the noise key (``vflprivacy.noise``), created in this party's job folder the first time: the
  label defence's noise and the randomised labels are drawn from it, so a resumed job draws the
  same ones, and no other party can reproduce them from the job's seed;
- with ``label_dp_epsilon``, randomised response on the training rows' labels (keyed
  ("label_dp", 0)): the job trains on these for its whole length. The held-out rows keep their
  true labels, which never leave this party: they only score the model.

What it reports (the log line and ``summary.json``) is the settings and ε, and with label DP how
many training labels the draw flipped, never a label. A large ε on a small table may flip none
(issue 38: ε = 4 flipped 0 of 162): the job then trains on the true labels, bit for bit as an
undefended one, and the report says so rather than let ε suggest protection it did not add.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import torch

from vflcore.job.spec import JobSpec
from vflprivacy.label_defences import keep_probability, randomised_response
from vflprivacy.noise import noise_generator, noise_key

log = structlog.get_logger(__name__)

#: The randomised response's name in ``noise_generator``.
LABEL_DP_NOISE = "label_dp"
#: What the report says when randomised response kept every training label.
NOTHING_FLIPPED = (
    "no training label was flipped: this job trained on the true labels, exactly as without label DP; "
    "lower label_dp_epsilon (or train on more rows) for the randomisation to act"
)


@dataclass(frozen=True)
class TrainingLabels:
    """What the active half trains with: its labels (randomised if asked), the noise key, and the report."""

    labels: torch.Tensor
    key: bytes | None = None
    #: The job's ``[privacy]`` settings and, with label DP, ε and the probability a label is kept.
    report: dict[str, Any] = field(default_factory=dict)


def labels_to_train_on(job: JobSpec, labels: torch.Tensor, train_rows: np.ndarray, folder: Path) -> TrainingLabels:
    """The labels to train on and the key for ``job``, from the aligned ``labels``; unchanged without protection.

    ``folder`` is this party's job folder, where the key is kept (mode 0600).
    """
    spec = job.privacy
    report = privacy_report(job)
    if not spec.needs_noise_key:
        return TrainingLabels(labels, None, report)
    key = noise_key(folder)
    trained = labels
    if spec.label_dp_epsilon > 0:
        trained = labels.clone()
        rows = torch.from_numpy(np.asarray(train_rows, dtype=np.int64))
        rng = noise_generator(key, LABEL_DP_NOISE, 0)
        trained[rows] = randomised_response(labels[rows], job.num_outputs, spec.label_dp_epsilon, rng)
        flipped = int((trained[rows] != labels[rows]).sum())
        report["label_dp"] = {**report.get("label_dp", {}), "flipped": flipped, "training_rows": len(rows)}
        if flipped == 0:
            report["label_dp"]["note"] = NOTHING_FLIPPED
            log.warning("label_dp_flipped_nothing", epsilon=spec.label_dp_epsilon, training_rows=len(rows))
    if spec.protects_labels:
        log.info("label_protection", **report)
    return TrainingLabels(trained, key, report)


def privacy_report(job: JobSpec) -> dict[str, Any]:
    """The job's ``[privacy]`` settings, with ε-label-DP's ε and keep probability when it is on."""
    spec = job.privacy
    report: dict[str, Any] = spec.as_dict()
    if spec.label_dp_epsilon > 0 and job.task == "classification":
        report["label_dp"] = {
            "epsilon": spec.label_dp_epsilon,
            "classes": job.num_outputs,
            "keep_probability": keep_probability(spec.label_dp_epsilon, job.num_outputs),
        }
    return report


__all__ = ["LABEL_DP_NOISE", "NOTHING_FLIPPED", "TrainingLabels", "labels_to_train_on", "privacy_report"]
