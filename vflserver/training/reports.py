"""What a job reports on the active party: each epoch's losses and metrics, its outcome, and its files.

``EpochReport`` is one epoch, ``RunSummary`` the whole job; at the end the held-out rows'
predictions go to ``test_predictions.csv`` and the summary to ``summary.json``, in the active
party's run folder. The predictions file is written a slice of rows at a time through Arrow,
with no Python object per row: at 10M aligned rows the
held-out rows number 2M.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vflcore.data import id_arrays
from vflcore.job.schedule import Schedule
from vflcore.job.spec import JobSpec
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
    #: With ``[job] validation_fraction``: the loss and metrics on the validation rows (else None, {}).
    valid_loss: float | None = None
    valid_metrics: dict[str, float] = field(default_factory=dict)
    #: With ``[job] eval_every_rounds``: the test scores taken inside the epoch (``RoundScore.plain``).
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def plain(self) -> dict[str, Any]:
        """Its fields as Python numbers (no NumPy scalars), as a checkpoint stores them."""
        return {
            **vars(self),
            "train_loss": float(self.train_loss),
            "test_loss": float(self.test_loss),
            "metrics": _floats(self.metrics),
            "valid_loss": None if self.valid_loss is None else float(self.valid_loss),
            "valid_metrics": _floats(self.valid_metrics),
        }


@dataclass(frozen=True)
class RoundScore:
    """The test rows scored after ``round`` training steps of the job, inside an epoch (``eval_every_rounds``)."""

    round: int
    test_loss: float
    metrics: dict[str, float]

    def plain(self) -> dict[str, Any]:
        return {"round": self.round, "test_loss": float(self.test_loss), "metrics": _floats(self.metrics)}


def _floats(values: dict[str, float]) -> dict[str, float]:
    return {name: float(value) for name, value in values.items()}


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
    #: (``vflserver.training.training_labels.privacy_report``).
    privacy: dict[str, Any] = field(default_factory=dict)
    #: The distilled student's own summary (``[distill]``, ``vflserver.training.distillation``), else None.
    student: RunSummary | None = None
    #: With ``[job] validation_fraction``: the epoch (from 0) whose model is served, and whether
    #: ``patience`` ended training before ``epochs``.
    best_epoch: int | None = None
    stopped_early: bool = False
    #: Why training stopped short of ``epochs`` when it ran away after a best epoch: the divergence's
    #: message (``divergence.remember``); the best epoch was served instead. None: it did not diverge.
    diverged: str | None = None
    #: How many aligned rows train, validate and test, and where the test rows came from.
    split: dict[str, Any] = field(default_factory=dict)


def split_summary(schedule: Schedule, held_out_ids: Path | None) -> dict[str, Any]:
    """How many aligned rows trained, validated and tested, and where the test rows came from."""
    return {
        "train_rows": len(schedule.train_rows),
        "validation_rows": len(schedule.valid_rows),
        "test_rows": len(schedule.test_rows),
        "test_rows_from": "test_fraction" if held_out_ids is None else str(held_out_ids),
    }


def write_predictions(
    run_dir: Path, task: str, ids: Sequence[str] | np.ndarray, labels: np.ndarray, output: np.ndarray
) -> None:
    """``test_predictions.csv``: each held-out row's id, label and predicted class (or value).

    Numbers are written as the per-row f-strings of earlier versions wrote them (byte for byte),
    IDs as they are, quoted as ``csv`` does only when they hold a comma, a quote or a line break.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    predicted = output.argmax(axis=1) if task == "classification" else output.reshape(-1)
    ids, labels = np.asarray(ids), np.asarray(labels)
    if not len(ids) == len(labels) == len(predicted):
        raise ValueError(
            f"test_predictions.csv: {len(ids)} IDs, {len(labels)} labels and {len(predicted)} predictions; "
            "each held-out row needs all three"
        )
    with (run_dir / "test_predictions.csv").open("wb") as fh:
        fh.write(b"id,label,prediction\n")
        for start in range(0, len(ids), _SLICE_ROWS):
            rows = slice(start, start + _SLICE_ROWS)
            fields = _csv_field(id_arrays.arrow_ids(ids[rows])), _text(labels[rows]), _text(predicted[rows])
            line = pc.binary_join_element_wise(pc.binary_join_element_wise(*fields, _COMMA), _NEWLINE, _NOTHING)
            for part in id_arrays.utf8_chunks(line):
                fh.write(part.data)


#: Rows per slice of ``test_predictions.csv``: bounds the Arrow strings held at once.
_SLICE_ROWS = 1 << 20
_COMMA = pa.scalar(",", pa.large_string())
_NEWLINE = pa.scalar("\n", pa.large_string())
_NOTHING = pa.scalar("", pa.large_string())


def _text(values: np.ndarray) -> pa.Array:
    """Numbers as an f-string writes them, formatted in C by numpy's cast to strings.

    An f-string formats a float32 as the Python float it widens to (``0.5110228061676025``, not
    ``str``'s ``0.5110228``): cast to float64 first, whose strings are Python's ``repr``.
    """
    values = np.asarray(values)
    if values.dtype.kind == "f":
        values = values.astype(np.float64)
    return id_arrays.arrow_ids(values.astype(np.dtypes.StringDType()))


def _csv_field(values: pa.Array) -> pa.Array:
    """Values quoted as ``csv.writer`` quotes them (QUOTE_MINIMAL): only those with a comma, quote or line break."""
    quote = pa.scalar('"', pa.large_string())
    quoted = pc.binary_join_element_wise(quote, pc.replace_substring(values, '"', '""'), quote, _NOTHING)
    return pc.if_else(pc.match_substring_regex(values, '[,"\r\n]'), quoted, values)


def _student(student: RunSummary) -> dict[str, Any]:
    """The student's part of its job's summary: its name, metrics and model files (its own summary has the rest)."""
    return {
        "name": student.job_id,
        "epochs": len(student.epochs),
        "final_metrics": student.final_metrics,
        "artifact": None if student.artifact is None else str(student.artifact),
        "model_repository": None if student.model_repository is None else str(student.model_repository),
    }


def write_summary(run_dir: Path, job: JobSpec, summary: RunSummary, step_losses: Sequence[float]) -> None:
    """``summary.json``: the alignment, every epoch and step loss, the final metrics, bytes, model files and privacy."""
    alignment = summary.alignment
    payload: dict[str, Any] = {
        "job_id": summary.job_id,
        "algorithm": job.algorithm,
        "aligned_rows": job.num_rows,
        "psi": None if alignment is None else {"reused": alignment.reused, "pairwise": alignment.pairwise},
        "split": summary.split,
        "best_epoch": summary.best_epoch,
        "stopped_early": summary.stopped_early,
        "diverged": summary.diverged,
        "epochs": [vars(e) for e in summary.epochs],
        "step_losses": list(step_losses),
        "final_metrics": summary.final_metrics,
        "wire_bytes": {str(party): phases for party, phases in summary.wire.items()},
        "artifact": None if summary.artifact is None else str(summary.artifact),
        "onnx": None if summary.onnx is None else str(summary.onnx),
        "model_repository": None if summary.model_repository is None else str(summary.model_repository),
        "privacy": summary.privacy,
        "student": None if summary.student is None else _student(summary.student),
    }
    (run_dir / "summary.json").write_text(json.dumps(payload, indent=2))
