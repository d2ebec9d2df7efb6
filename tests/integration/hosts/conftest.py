"""One deployment of the four hosts for both separate-hosts files, with its console and fault-free job.

Why one: each file set up its own (a wheel install per host, certificates, three daemons started
from their venvs and the operator's console) and trained the same fault-free SplitNN job on it, so
the suite paid the set-up and the clean job twice. The two files run on one xdist worker as one
unit (``SAME_WORKER`` in ``tests/conftest.py``), so a session fixture is made once for both. The
hosts keep the settings of both files: serving on (the inference faults) and the server's 15 s
wait for a party's tensor (``STEP_TIMEOUT_S``), which the training faults never reach: a party
whose link is down is given up after ``heartbeat_timeout_s`` (3 s) of silence, well before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vfltesting.hosts.console import Console
from vfltesting.hosts.deployment import Deployment
from vfltesting.hosts.faults import EPOCHS, JOB, deployed, finish, job_outcome, wheel_folder
from vfltesting.recovery import JobOutcome
from vfltesting.service import job_document

#: The server's wait for one party's tensor (``[server] step_timeout_s``): 15 s, not the separate-hosts
#: 120 s. A federated inference request that the server handed to the parties just as their sessions
#: died (a link down) waits this long for their answer, holding every later request by ID behind it
#: (``AlignedPredictor``'s lock), although the parties rejoined within seconds: at 120 s the server's
#: 5 s outage took 120.7 s to recover from, in every run (2026-11-28), party 3's now and then too, and
#: that wait was most of the serving test's time; at 30 s, 30.2 and 30.7 s. Every step and PSI upload
#: over the 2 Mbit/s link takes well under a second.
STEP_TIMEOUT_S = 15


@pytest.fixture(scope="session")
def hosts(tmp_path_factory: pytest.TempPathFactory, digits_data: Path) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("hosts")
    server = {"step_timeout_s": STEP_TIMEOUT_S}
    with deployed(root, wheel_folder(tmp_path_factory.getbasetemp()), digits_data, server=server) as deployment:
        yield deployment


@pytest.fixture(scope="session")
def console(hosts: Deployment) -> Iterator[Console]:
    with hosts.console() as console:
        yield console


@pytest.fixture(scope="session")
def clean(hosts: Deployment, console: Console) -> JobOutcome:
    """The fault-free SplitNN job: PSI and training across the hosts, the run every fault is compared with."""
    job_id = console.submit(job_document("clean", "splitnn", epochs=EPOCHS, **JOB))
    finish(hosts, console, job_id)
    return job_outcome(hosts, job_id)
