"""Every attack probe on one passive party's recording of a job: the figures of ``make bench-privacy`` and the tests.

``vflprivacy.attacks`` works on per-row arrays; a recording (``vflprivacy.recording``) holds
tensors per (round, batch on the wire). This glue puts them back in row order, which takes the
algorithms' batch layout (the shared schedule, and ``[algorithm] micro_batches`` parts), and picks,
per algorithm, the tensors an attacker would use:

- label inference reads the per-row answer the passive party RECEIVED: ∂L/∂h^k for the SplitNN
  family; for VIMADMM and VIMADMM-J the dual λ_B (at the server's exact solution of Eq. 6,
  λ_j = softmax(z_j) − onehot(y_j), the loss gradient at z_j, so it is as telling as SplitNN's
  gradient), and on its own the party's residual s^k_B (``residual_*`` figures), which the label
  defence perturbs separately; for APFed the active party's embedding h^A, trained on the labels;
- feature inversion reads the per-row tensor the party SENT: h^k, VIMADMM-J's logits o^k, or
  APFed's ∂L_p/∂h^A (APFed-R's loss reconstructs the party's features from h^A, so the gradient
  carries them);
- model completion reads the party's own trained representation of every aligned row, or for
  APFed (whose passive party has none: the active party predicts alone) the h^A it received in
  the last epoch, the label-trained representation it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from vflalgorithms.apfed.spec import ACTIVE_EMBEDDING, PASSIVE_GRADIENT
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.overlap import MicroBatches, overlap_options
from vflalgorithms.vimadmm.spec import ADMM_DUAL, ADMM_RESIDUAL
from vflcore.job.spec import JobSpec
from vflcore.wire.names import EMBEDDING, GRADIENT
from vflprivacy import attacks
from vflprivacy.recording import RECEIVED, ROWS_FILE, SENT, Recording


@dataclass(frozen=True)
class ProbedTensors:
    """Which recorded tensors an algorithm's probes read."""

    #: The per-row answer the passive party receives (label attacks).
    answer: str
    #: The per-row tensor it sends (inversion).
    upload: str
    #: Model completion on the answer of the last epoch instead of the party's own representation.
    complete_on_answer: bool = False
    #: A second per-row answer, attacked on its own (VIMADMM's residual s^k_B): the ``residual_*`` figures.
    residual: str | None = None


_SPLIT = ProbedTensors(answer=GRADIENT, upload=EMBEDDING)
_ADMM = ProbedTensors(answer=ADMM_DUAL, upload=EMBEDDING, residual=ADMM_RESIDUAL)
_APFED = ProbedTensors(answer=ACTIVE_EMBEDDING, upload=PASSIVE_GRADIENT, complete_on_answer=True)

#: The algorithms that exchange per-row tensors, and what each one's probes read.
PROBED: dict[str, ProbedTensors] = {
    "splitnn": _SPLIT,
    "fedbcd": _SPLIT,
    "async": _SPLIT,
    "vimsgd": _SPLIT,
    "vimadmm": _ADMM,
    "vimadmm_j": _ADMM,
    "apfed_r": _APFED,
    "apfed_c": _APFED,
}

_NO_ROWS = "its passive party sends its feature maps of every row once and receives the extractor's weights"
#: Why a probe does not apply, by (algorithm, attack); the figures are NaN there. A multi-class task
#: also has no norm attack (``vflprivacy.attacks.norm_attack``), and a regression task no label attack.
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("adptvfedconv", "norm"): f"no per-row answer reaches a passive party: {_NO_ROWS}",
    ("adptvfedconv", "direction"): f"no per-row answer reaches a passive party: {_NO_ROWS}",
    ("adptvfedconv", "completion"): f"not probed: {_NO_ROWS}, and its bottom model learns no label signal",
    ("adptvfedconv", "inversion"): f"not probed: {_NO_ROWS} (once, in the convolution's layout, not per batch)",
}

#: The norm, direction, completion and inversion figures (issues 26 and 38).
_FIRST_KEYS = (
    "norm_auc",
    "norm_auc_max",
    "direction_auc_k1",
    "direction_auc_k1_max",
    "direction_auc_k10",
    "completion_1pct",
    "completion_5pct",
    "completion_raw_1pct",
    "completion_raw_5pct",
    "inversion_mse",
    "inversion_baseline_mse",
    "inversion_r2",
    "residual_norm_auc",
    "residual_direction_auc_k1",
    "residual_direction_auc_k1_max",
)
#: The stronger attacker (issue 48): each attack on the last epoch's answers, then the strongest
#: (the maximum over every attack, on each epoch's rows and on rows averaged over epochs) per phase.
STRONGER_KEYS = (
    "abs_direction_auc_k1",
    "relative_norm_auc",
    "norm_dispersion_auc",
    "probe_auc_per_batch",
    "probe_auc_k10",
    "cluster_auc",
    "averaged_strongest_auc",
    "strongest_auc_first10",
    "strongest_auc_last10",
    "strongest_auc_run",
    "residual_strongest_auc_run",
)
#: The figures ``probe`` returns, all of them always present (NaN where an attack does not apply).
KEYS = (*_FIRST_KEYS, *STRONGER_KEYS)

#: ``label_attacks``' figures reported for the last epoch, by their key in ``KEYS``.
_LAST_EPOCH = {
    "abs_direction_k1": "abs_direction_auc_k1",
    "relative_norm": "relative_norm_auc",
    "norm_dispersion": "norm_dispersion_auc",
    "probe_per_batch": "probe_auc_per_batch",
    "probe_k10": "probe_auc_k10",
    "cluster": "cluster_auc",
}
#: A passive party lines a row up over this many of the latest epochs it received (issue 48: 10).
AVERAGED_EPOCHS = 10


def per_epoch_rows(
    recording: Recording, direction: str, name: str, job: JobSpec
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each recorded epoch's tensors named ``name`` as (aligned rows, one tensor row per row), in batch order.

    A batch on the wire is a whole batch of the epoch's schedule or, with ``[algorithm]
    micro_batches``, one part of one. A batch that was not recorded is left out; one whose row count
    does not fit the job's schedule is refused (the recording is of another job).
    """
    tensors = recording.tensors(direction, name)
    parts_per_batch = overlap_options(job_options(job)).micro_batches
    schedule = job.schedule()
    found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for epoch in sorted({round_ for round_, _ in tensors}):
        batches = schedule.batches(epoch)
        parts = MicroBatches(batches, parts_per_batch)
        rows, values = [], []
        for b, batch in enumerate(batches):
            for i, (start, stop) in enumerate(parts.bounds(b)):
                tensor = tensors.get((epoch, parts.wire(b, i)))
                if tensor is None:
                    continue
                if len(tensor) != stop - start:
                    raise ValueError(
                        f"{recording.folder}: {direction} {name!r} of round {epoch}, batch {parts.wire(b, i)} "
                        f"holds {len(tensor)} rows where job {job.job_id!r} has {stop - start}; "
                        "probe it with the job it recorded"
                    )
                rows.append(batch[start:stop])
                values.append(tensor.reshape(stop - start, -1))
        if rows:
            found[epoch] = (np.concatenate(rows), np.concatenate(values))
    return found


def _label_attacks(epochs: dict[int, tuple[np.ndarray, np.ndarray]], labels: np.ndarray, seed: int) -> dict[str, float]:
    per_epoch = {
        epoch: (
            attacks.norm_attack(answers, labels[rows]),
            attacks.direction_attack(answers, labels[rows], 1, seed),
            attacks.direction_attack(answers, labels[rows], 10, seed),
        )
        for epoch, (rows, answers) in epochs.items()
    }
    if not per_epoch:
        return {}
    norm, k1, k10 = per_epoch[max(per_epoch)]
    return {
        "norm_auc": norm,
        "norm_auc_max": attacks.strongest_of(v[0] for v in per_epoch.values()),
        "direction_auc_k1": k1,
        "direction_auc_k1_max": attacks.strongest_of(v[1] for v in per_epoch.values()),
        "direction_auc_k10": k10,
    }


def batch_of_rows(job: JobSpec, epoch: int, rows: np.ndarray) -> np.ndarray:
    """In ``epoch``'s schedule, the batch each of ``rows`` was in: the party knows what it sent together."""
    where = np.empty(job.num_rows, dtype=np.int64)
    for b, batch in enumerate(job.schedule().batches(epoch)):
        where[batch] = b
    found: np.ndarray = where[rows]
    return found


def _strongest(
    epochs: dict[int, tuple[np.ndarray, np.ndarray]], labels: np.ndarray, job: JobSpec, seed: int
) -> dict[str, float]:
    """The stronger attacker's figures: every attack on the last epoch, the strongest per phase of training.

    A phase's figure is the largest of the strongest attack on each of its epochs and, where it
    spans more than one epoch, on its rows averaged over those epochs (``attacks.epoch_average``).
    The first and last 10 % of the epochs recorded hold at least one epoch each; the whole run's
    averaged attacker lines rows up over the last ``AVERAGED_EPOCHS`` epochs.
    """
    if not epochs:
        return {}
    ordered = sorted(epochs)
    each = {
        epoch: attacks.label_attacks(values, labels[rows], batch_of_rows(job, epoch, rows), seed)
        for epoch, (rows, values) in epochs.items()
    }

    def phase(chosen: list[int]) -> float:
        figures = [each[epoch]["strongest"] for epoch in chosen]
        if len(chosen) > 1:
            rows, averaged = attacks.epoch_average({epoch: epochs[epoch] for epoch in chosen})
            batches = batch_of_rows(job, chosen[-1], rows)
            figures.append(attacks.label_attacks(averaged, labels[rows], batches, seed)["strongest"])
        return attacks.strongest_of(figures)

    tenth = max(1, math.ceil(len(ordered) / 10))
    last = each[ordered[-1]]
    averaged = ordered[-AVERAGED_EPOCHS:]
    rows, values = attacks.epoch_average({epoch: epochs[epoch] for epoch in averaged})
    averaged_figure = attacks.label_attacks(values, labels[rows], batch_of_rows(job, averaged[-1], rows), seed)
    return {
        **{key: last[name] for name, key in _LAST_EPOCH.items()},
        "averaged_strongest_auc": averaged_figure["strongest"],
        "strongest_auc_first10": phase(ordered[:tenth]),
        "strongest_auc_last10": phase(ordered[-tenth:]),
        "strongest_auc_run": attacks.strongest_of(
            [*(v["strongest"] for v in each.values()), averaged_figure["strongest"]]
        ),
    }


def probe(folder: Path, job: JobSpec, features: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict[str, float]:
    """Every probe on the recording in ``folder`` of one passive party's part in ``job``.

    ``features`` are that party's features and ``labels`` the active party's labels, both over
    the aligned rows in their shared order. Label attacks are reported for the last epoch and
    (``*_max``) the most telling epoch; completion at 1 % and 5 % labelled rows, with the same
    head on the raw features beside it; inversion from the last epoch's uploads with 10 % of
    the rows known. NaN where an attack does not apply (``NOT_APPLICABLE``, or the task).
    """
    recording = Recording(folder)
    figures = dict.fromkeys(KEYS, math.nan)
    tensors = PROBED.get(job.algorithm)
    if tensors is None:
        return figures
    if not job.num_rows:
        job = _with_rows(job, recording)
    features = np.asarray(features)
    classification = job.task == "classification"
    labels = np.asarray(labels).astype(np.int64) if classification else np.asarray(labels)

    answers = per_epoch_rows(recording, RECEIVED, tensors.answer, job)
    if classification:
        figures.update(_label_attacks(answers, labels, seed))
        figures.update(_strongest(answers, labels, job, seed))
        if tensors.residual is not None:
            residuals = per_epoch_rows(recording, RECEIVED, tensors.residual, job)
            residual = _label_attacks(residuals, labels, seed)
            figures.update({f"residual_{key}": residual.get(key, math.nan) for key in _RESIDUAL})
            strongest = _strongest(residuals, labels, job, seed).get("strongest_auc_run", math.nan)
            figures["residual_strongest_auc_run"] = strongest
        if tensors.complete_on_answer:
            rows, held = answers[max(answers)] if answers else (np.arange(0), None)
        else:
            rows, held = np.arange(len(labels)), recording.embeddings()
        if held is not None:
            for percent in (1, 5):
                done = attacks.model_completion(held, features[rows], labels[rows], percent / 100, seed)
                figures[f"completion_{percent}pct"] = done.federated
                figures[f"completion_raw_{percent}pct"] = done.raw

    uploads = per_epoch_rows(recording, SENT, tensors.upload, job)
    if uploads:
        rows, sent = uploads[max(uploads)]
        inverted = attacks.inversion(sent, features[rows], aux_fraction=0.1, seed=seed)
        figures.update(
            inversion_mse=inverted.mse, inversion_baseline_mse=inverted.baseline_mse, inversion_r2=inverted.mean_r2
        )
    return figures


#: The label attacks' figures kept for the residual s^k_B.
_RESIDUAL = ("norm_auc", "direction_auc_k1", "direction_auc_k1_max")


def _with_rows(job: JobSpec, recording: Recording) -> JobSpec:
    """``job`` with the aligned row count the recording holds (a job as configured does not know it)."""
    rows = recording.aligned_rows()
    if rows is None:
        raise ValueError(
            f"{recording.folder} holds no {ROWS_FILE}: the party's training did not finish; train it to the end"
        )
    return replace(job, num_rows=rows)


__all__ = [
    "AVERAGED_EPOCHS",
    "KEYS",
    "NOT_APPLICABLE",
    "PROBED",
    "STRONGER_KEYS",
    "ProbedTensors",
    "batch_of_rows",
    "per_epoch_rows",
    "probe",
]
