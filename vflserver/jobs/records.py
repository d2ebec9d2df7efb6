"""What the job store holds, as the rest of the service sees it: a job's states and its records.

The states and the changes allowed between them (``NEXT_STATES``), the three frozen records the
store hands out (``JobRecord``, ``EpochRecord``, ``JobEvent``), and how each is read back from its
SQLite row. ``vflserver.jobs.store`` writes them; nothing here touches the file.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JOB_STATES = ("queued", "aligning", "training", "waiting", "finished", "failed", "cancelled", "interrupted")
ENDED = frozenset({"finished", "failed", "cancelled", "interrupted"})  # a Watch stream ends at these

# The only state changes allowed. A PSI-only job finishes straight after aligning; a job whose
# party was lost is waiting for it, then aligns again and resumes from a checkpoint; an
# interrupted job goes back to the queue when the server starts again, to resume the same way.
# A queued or waiting job may "change" to its own state: a new message, such as the party it
# now waits for (``vflserver.jobs.scheduling``).
NEXT_STATES: dict[str, frozenset[str]] = {
    "queued": frozenset({"queued", "aligning", "failed", "cancelled"}),
    "aligning": frozenset({"training", "waiting", "finished", "failed", "cancelled", "interrupted"}),
    "training": frozenset({"waiting", "finished", "failed", "cancelled", "interrupted"}),
    "waiting": frozenset({"waiting", "training", "finished", "failed", "cancelled", "interrupted"}),
    "finished": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
    "interrupted": frozenset({"queued"}),
}
WITH_ERROR = frozenset({"failed", "cancelled", "interrupted"})  # their message is the job's error


@dataclass(frozen=True)
class EpochRecord:
    """What one training epoch produced, as the runner reports it."""

    epoch: int  # 0-based
    train_loss: float
    test_loss: float
    metrics: dict[str, float]
    seconds: float
    wire_bytes: int


@dataclass(frozen=True)
class JobRecord:
    """A job as the store holds it now."""

    job_id: str
    document: dict[str, Any]  # the job file as submitted (JSON-able dict of TOML tables)
    algorithm: str
    epochs: int  # epochs the job asks for
    state: str
    submitter: str
    submitted_at: float  # time.time()
    started_at: float | None
    ended_at: float | None
    error: str  # "" if none
    epochs_done: int
    final_metrics: dict[str, float]
    served: bool
    #: A ``[distill]`` job's student: its metrics on the same held-out rows (empty: no student).
    student_metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class JobEvent:
    """One entry of a job's history: a state change, a finished epoch or a warning."""

    job_id: str
    seq: int  # 1, 2, ... per job
    at: float
    kind: str  # "state", "epoch" or "warning" (the job goes on: ``vflserver.training.divergence``)
    state: str  # the job's state after the event
    message: str
    epoch: EpochRecord | None  # kind == "epoch" only
    final_metrics: dict[str, float]  # set on the "finished" state event


# ---- rows ----------------------------------------------------------------------------------------


def job_from_row(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        job_id=row["job_id"],
        document=json.loads(row["document"]),
        algorithm=row["algorithm"],
        epochs=row["epochs"],
        state=row["state"],
        submitter=row["submitter"],
        submitted_at=row["submitted_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        error=row["error"],
        epochs_done=row["epochs_done"],
        final_metrics=json.loads(row["final_metrics"]),
        served=bool(row["served"]),
        student_metrics=json.loads(row["student_metrics"]),
    )


def event_from_row(row: sqlite3.Row) -> JobEvent:
    epoch = None if row["epoch"] is None else EpochRecord(**json.loads(row["epoch"]))
    return JobEvent(
        job_id=row["job_id"],
        seq=row["seq"],
        at=row["at"],
        kind=row["kind"],
        state=row["state"],
        message=row["message"],
        epoch=epoch,
        final_metrics=json.loads(row["final_metrics"]),
    )


def plain_floats(metrics: Mapping[str, float]) -> dict[str, float]:
    return {str(name): float(value) for name, value in metrics.items()}


def nan_as_null(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def epoch_from_row(row: sqlite3.Row) -> EpochRecord:
    return EpochRecord(
        epoch=row["epoch"],
        train_loss=_null_as_nan(row["train_loss"]),
        test_loss=_null_as_nan(row["test_loss"]),
        metrics=json.loads(row["metrics"]),
        seconds=row["seconds"],
        wire_bytes=row["wire_bytes"],
    )


def _null_as_nan(value: float | None) -> float:
    return math.nan if value is None else value
