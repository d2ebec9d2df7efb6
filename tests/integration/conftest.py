"""Fixtures for the integration tests: the daemon launcher, active parties and services in this process.

What they start comes from ``vfltesting.in_process`` (an active party on port 0 over mTLS, its job
in a thread; the whole service); each fixture stops what it started at teardown.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from vflcore.job.spec import JobSpec
from vflserver.jobs.app import Service
from vfltesting.forked import SHARED_ENV, Launcher
from vfltesting.in_process import RunningJob, start_job, start_service, stop_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki
from vfltesting.service import daemons_forked_by, service_env


@pytest.fixture(scope="session", autouse=True)
def forked_daemons() -> Iterator[Launcher]:
    """``ServiceRun``'s daemons are forked from a pre-imported launcher (``vfltesting.forked``): each
    start then costs tenths of a second of CPU, not 2.3 s. Under xdist, the one the controller
    started for every worker (tests/conftest.py); in one process, this process's own."""
    address = os.environ.get(SHARED_ENV)
    with (
        Launcher.attached(address) if address else Launcher(service_env()) as launcher,
        daemons_forked_by(launcher),
    ):
        yield launcher


@pytest.fixture
def job_factory(pki: Pki, digits_data: Path, tmp_path: Path) -> Iterator[Callable[..., RunningJob]]:
    """Start active parties on the digits data; every server is stopped at teardown."""
    started: list[RunningJob] = []

    def make(job: JobSpec = SMALL_JOB, **kwargs: Any) -> RunningJob:
        running = start_job(pki, digits_data, tmp_path, job, **kwargs)
        started.append(running)
        return running

    yield make
    for running in started:
        stop_job(running)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Both runs use one intra-op thread, so neither gets a different reduction order (and the
    three parties' threads do not fight over two cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def service(pki: Pki, digits_data: Path, tmp_path: Path) -> Iterator[Service]:
    """``start_service`` for one test."""
    service = start_service(pki, digits_data, tmp_path / "runs")
    try:
        yield service
    finally:
        service.stop(grace_s=0)
