"""Train one job twice, federated over mTLS and by the in-process reference, and compare them.

The server and the passive parties run in the test process (threads, port 0, certificates from
the session PKI), so every tensor still crosses the wire: serialised, chunked, sent over TLS and
validated. The reference (each algorithm's ``reference.py``) trains the same models with the same seeds and
schedule in plain torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflalgorithms.apfed.reference import ReferenceAPFed
from vflalgorithms.halves import ServerAlgorithm
from vflalgorithms.registry import algorithm_spec
from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflclient import read_party_csv
from vflcore.job.spec import JobSpec
from vflserver.training.reports import RunSummary
from vfltesting.in_process import RunningJob, run_whole_job
from vfltesting.pki import Pki

# Per-step losses may differ only by float32 rounding: the wire carries the exact float32 bytes.
LOSS_TOLERANCE = 1e-5
#: The fewest steps a comparison holds equal: 60, four epochs of the digits job (it was 100, seven);
#: a run that performs other float operations than its reference parts from it within a few steps.
MIN_STEPS = 60
TOP_HIDDEN = (64,)


@dataclass(frozen=True)
class Comparison:
    """One job trained twice: federated over mTLS, and by the in-process reference."""

    federated: RunSummary
    federated_losses: list[float]
    reference: ReferenceSplitNN | ReferenceAPFed
    test_rows: np.ndarray
    algorithm: ServerAlgorithm  # the server's half, as it ended
    running: RunningJob  # the federated run: its active party and passive parties, as they ended


def compare(
    job: JobSpec, data: Path, pki: Pki, tmp_path: Path, *, top_dropout: float = 0.0, **active: Any
) -> Comparison:
    """``job`` federated (``active`` goes to ``ActiveParty``, e.g. its ``factories``) and by the reference."""
    running = run_whole_job(pki, data, tmp_path, job, top_hidden=TOP_HIDDEN, top_dropout=top_dropout, **active)
    summary = running.summary()

    tables = {1: read_party_csv(data / "party1.csv", label_column="label")}
    tables.update({p: read_party_csv(data / f"party{p}.csv") for p in job.passive_parties})
    # The reference aligns in plaintext (sorted common IDs), which must be what PSI agreed on.
    builder = algorithm_spec(job.algorithm).reference_class()
    reference = builder.from_tables(job, tables, top_hidden=TOP_HIDDEN, top_dropout=top_dropout)
    assert summary.alignment is not None
    assert np.array_equal(summary.alignment.table.ids, reference.ids)
    for epoch in range(job.epochs):
        reference.train_epoch(epoch)
    algorithm = running.active.algorithm
    return Comparison(
        summary, list(algorithm.step_losses), reference, running.active.schedule.test_rows, algorithm, running
    )


#: Where a report says the two runs first parted: a difference above float32 rounding of a loss ~1.
ROUNDING = 1e-7


def assert_same_steps(run: Comparison) -> None:
    assert_same_losses(run.federated_losses, run.reference.step_losses, run.federated.job_id)


def assert_same_losses(federated_losses: Sequence[float], reference_losses: Sequence[float], job_id: str) -> None:
    """Every step's loss agrees within ``LOSS_TOLERANCE``; prints where the runs first parted by more than rounding.

    The print (seen with ``pytest -s``) is the early warning: a run that agrees to 1e-5 but parts
    at step 3 performs different float operations from its reference, and a longer job, or
    another CPU, would fail.
    """
    federated, reference = np.array(federated_losses), np.array(reference_losses)
    assert len(federated) == len(reference) >= MIN_STEPS
    gaps = np.abs(federated - reference)
    parted = np.flatnonzero(gaps > ROUNDING)
    first = f"step {parted[0]} of {len(gaps)}" if parted.size else "never"
    print(f"equivalence {job_id}: largest step difference {gaps.max():.3g}, first above {ROUNDING:g}: {first}")
    worst = int(np.argmax(gaps))
    assert np.allclose(federated, reference, rtol=0, atol=LOSS_TOLERANCE), (
        f"step {worst}: federated loss {federated[worst]!r}, reference {reference[worst]!r}"
    )
