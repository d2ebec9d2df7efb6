"""A job cancelled between the runner picking it up and starting it is left cancelled; the runner lives on.

Seen once in CI (a fresh clone, 1 run of 3): ``Cancel`` landed after ``next_queued`` had returned
the job but before the runner moved it to ``aligning``. The runner's move then raised
``JobStateError``, and so did its attempt to record the failure, which ended the runner's thread:
no later job would have run. Here the two steps are taken by hand, in that order, on a real store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vflcore.runtime.config import DataSource, ServerConfig, ServerSettings
from vflserver.federation.board import JobBoard
from vflserver.jobs.runner import JobRunner
from vflserver.jobs.store import JobStore
from vfltesting.service import job_document

pytestmark = [pytest.mark.integration]


def test_a_job_cancelled_after_it_was_picked_never_starts(digits_data: Path, tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    try:
        _pick_cancel_run(store, digits_data, tmp_path)
    finally:
        store.close()


def _pick_cancel_run(store: JobStore, digits_data: Path, tmp_path: Path) -> None:
    datasets = {"digits": DataSource(digits_data / "party1.csv", "id", "label")}
    config = ServerConfig(tls=None, datasets=datasets, settings=ServerSettings(run_dir=tmp_path / "runs"))
    runner = JobRunner(store, JobBoard(), config)
    store.submit("picked", job_document("picked", "splitnn"), algorithm="splitnn", epochs=1, submitter="alice")
    picked = store.next_queued()
    assert picked is not None and picked.job_id == "picked"
    runner.cancel("picked", "alice")  # lands before the runner starts it
    runner._run(picked)  # the runner's next step, which used to raise
    ended = store.get("picked")
    assert ended.state == "cancelled" and ended.error == "cancelled by alice before it started"
