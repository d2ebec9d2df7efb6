"""Asynchronous VFL over real mTLS: trains without waiting for a slow party, within the staleness bound.

Server and parties run in this process (servers on port 0). Party 3 is delayed before every
step by the job's own delay injector (round-robin over party 3 alone, 40 ms); party 2 is not.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vflalgorithms.asynchronous.active import AsyncServer
from vflalgorithms.halves import ServerAlgorithm
from vflcore.job.spec import JobSpec
from vflserver.training.reports import RunSummary
from vfltesting.in_process import run_whole_job
from vfltesting.jobs import REFERENCE_JOB
from vfltesting.pki import Pki

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]

MAX_STALENESS = 3
ASYNC_JOB = replace(REFERENCE_JOB, job_id="async-digits", algorithm="async", epochs=4)
DELAYED_JOB = replace(
    REFERENCE_JOB,
    job_id="async-delayed",
    algorithm="async",
    epochs=2,
    algorithm_options={"max_staleness": MAX_STALENESS, "delay": "round_robin", "delay_s": 0.04, "delayed_parties": [3]},
)
# Seen: 0.833 after 4 epochs (0.966 after 12, with a bar of 0.90; 4 cut the module's CPU from 6.5 to 4.2 CPU-s);
# the margin allows for the arrival order, which varies run to run.
ACCURACY_BAR = 0.70


def _run(job: JobSpec, pki: Pki, data: Path, tmp: Path) -> tuple[RunSummary, ServerAlgorithm]:
    running = run_whole_job(pki, data, tmp, job)
    return running.summary(), running.active.algorithm


def test_async_trains_to_the_accuracy_bar(pki: Pki, digits_data: Path, tmp_path: Path) -> None:
    """Every party's batch trained on arrival with the others' cached embeddings; accuracy >= 0.70."""
    summary, algorithm = _run(ASYNC_JOB, pki, digits_data, tmp_path)
    assert isinstance(algorithm, AsyncServer)
    assert len(algorithm.step_losses) == 2 * 4 * 15  # one server update per party and batch
    assert summary.final_metrics["accuracy"] >= ACCURACY_BAR


def test_a_delayed_party_does_not_hold_the_others_back_beyond_the_bound(
    pki: Pki, digits_data: Path, tmp_path: Path
) -> None:
    """Party 2 runs ahead of the delayed party 3, up to max_staleness batches and never further."""
    _, algorithm = _run(DELAYED_JOB, pki, digits_data, tmp_path)
    assert isinstance(algorithm, AsyncServer)
    leads = [batch - slowest for party, batch, slowest in algorithm.arrivals if party == 2]
    assert max(leads) == MAX_STALENESS, "party 2 should have run ahead until the bound stopped it"
    assert all(lead <= MAX_STALENESS for lead in leads)
