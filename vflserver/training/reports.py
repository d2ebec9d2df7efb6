"""What a job reports on the active party: each epoch's losses and metrics, its outcome, and its files.

``EpochReport`` is one epoch, ``RunSummary`` the whole job; at the end the held-out rows'
predictions go to ``test_predictions.csv`` and the summary to ``summary.json``, in the active
party's run folder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflcore.job import JobSpec
from vflserver.federation.alignment import AlignmentResult


@dataclass(frozen=True)
class EpochReport:
    """What one epoch did: its mean training loss and the held-out metrics after it."""

    epoch: int
    train_loss: float
    test_loss: float
    metrics: dict[str, float]
    seconds: float
    wire_mb: float = 0.0  # training traffic of the epoch, both directions, every party

    def plain(self) -> dict[str, Any]:
        """Its fields as Python numbers (no NumPy scalars), as a checkpoint stores them."""
        return {
            **vars(self),
            "train_loss": float(self.train_loss),
            "test_loss": float(self.test_loss),
            "metrics": {name: float(value) for name, value in self.metrics.items()},
        }


@dataclass
class RunSummary:
    """The outcome of a job on the active party."""

    job_id: str
    alignment: AlignmentResult | None = None
    epochs: list[EpochReport] = field(default_factory=list)
    final_metrics: dict[str, float] = field(default_factory=dict)
    run_dir: Path | None = None
    #: Bytes per passive party and phase (``vflcore.wire.traffic.Traffic.report``).
    wire: dict[int, dict[str, dict[str, int]]] = field(default_factory=dict)
    #: ‖W_k‖ per party for the VIM family (``vflserver.training.importance``), else None.
    client_importance: dict[int, float] | None = None
    #: The standalone model (APFed): ``model.onnx``, which serves without any passive party; else None.
    artifact: Path | None = None
    #: The active party's trained part as ONNX (every algorithm; the standalone model for APFed).
    onnx: Path | None = None
    #: The Triton model folder of the standalone model (``model_repository/<job>``), else None.
    model_repository: Path | None = None
    #: The job's ``[privacy]`` settings as this party applied them, with ε of its label DP
    #: (``vflserver.training.label_privacy.privacy_report``).
    privacy: dict[str, Any] = field(default_factory=dict)


def write_predictions(run_dir: Path, task: str, ids: Sequence[str], labels: np.ndarray, output: np.ndarray) -> None:
    """``test_predictions.csv``: each held-out row's id, label and predicted class (or value)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    predicted = output.argmax(axis=1) if task == "classification" else output.reshape(-1)
    with (run_dir / "test_predictions.csv").open("w") as fh:
        fh.write("id,label,prediction\n")
        for i, y, p in zip(ids, labels, predicted, strict=True):
            fh.write(f"{i},{y},{p}\n")


def write_summary(run_dir: Path, job: JobSpec, summary: RunSummary, step_losses: Sequence[float]) -> None:
    """``summary.json``: the alignment, every epoch and step loss, the final metrics, bytes, model files and privacy."""
    alignment = summary.alignment
    payload: dict[str, Any] = {
        "job_id": summary.job_id,
        "algorithm": job.algorithm,
        "aligned_rows": job.num_rows,
        "psi": None if alignment is None else {"reused": alignment.reused, "pairwise": alignment.pairwise},
        "epochs": [vars(e) for e in summary.epochs],
        "step_losses": list(step_losses),
        "final_metrics": summary.final_metrics,
        "wire_bytes": {str(party): phases for party, phases in summary.wire.items()},
        "artifact": None if summary.artifact is None else str(summary.artifact),
        "onnx": None if summary.onnx is None else str(summary.onnx),
        "model_repository": None if summary.model_repository is None else str(summary.model_repository),
        "privacy": summary.privacy,
    }
    (run_dir / "summary.json").write_text(json.dumps(payload, indent=2))
