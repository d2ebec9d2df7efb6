"""What the separate-hosts tests share: the deployment, link outages, and their figures.

``deployed`` builds the network, installs every host and starts the daemons, and takes it all
down on leaving, whatever happened. ``outage`` holds a host's link down for a given time: the
duration is the fault under test, so this waits wall-clock time on purpose. ``Figures`` appends
what each fault cost (seconds to recover, largest weight difference from the fault-free run) as
JSON lines to a file, for the operator's notes; ``FIGURES`` says where.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from vflcore.data.checkpoints import LATEST, load_checkpoint, party_dir
from vfltesting.freeze import frozen_process
from vfltesting.hosts.console import Console
from vfltesting.hosts.deployment import HOST_NAMES, PASSIVE, Deployment
from vfltesting.hosts.install import build_wheel
from vfltesting.hosts.network import Network, cannot_make_namespaces
from vfltesting.recovery import JobOutcome, tensors
from vfltesting.service import event_time

#: Why namespaces cannot be made here, or None: the only reason the separate-hosts files skip.
WHY_NOT = cannot_make_namespaces()
#: The separate-hosts test files' marks: integration, a long limit (30 s outages), skip with the reason.
MARKS = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.skipif(WHY_NOT is not None, reason=f"separate hosts need network namespaces: {WHY_NOT}"),
]
#: Training epochs of every separate-hosts job.
EPOCHS = 3
#: 59 steps an epoch: long enough to be frozen inside, short enough for three jobs.
JOB = {"batch_size": 16, "join_timeout_s": 120}

#: A long outage: the party's connection dies inside it and the party dials again, failing,
#: until the link is back. Measured here (2026-11-29, 45 s outages during PSI and inside an epoch):
#: the party's stream ended "No route to host" 10.3 and 9.6 s into the outage, then 12 failed dials
#: 3 s apart; after 5 s outages the old connection carried on. At 30 s, the same: the stream ended
#: about 10 s in and 7 dials failed before the party rejoined, in both training faults; and 30 s is
#: 10 times ``heartbeat_timeout_s`` (3 s, ``SERVER``): the server has given the party up and the
#: operator sees the job wait for it. It was 60 s, which showed nothing more (about 16 failed
#: dials) and cost 30 s more an outage, three outages in the suite.
LONG_OUTAGE_S = 30
#: A short outage: over before the connection is given up, as a blip on a WAN link.
SHORT_OUTAGE_S = 5

#: Where each fault's figures are appended, one JSON object a line (``VFL_FAULT_FIGURES`` overrides).
FIGURES = Path(os.environ.get("VFL_FAULT_FIGURES", "/tmp/vfl-separate-hosts-figures.jsonl"))

#: Short limits, so a lost party is noticed in seconds; party_timeout_s well above the longest outage.
SERVER = {"heartbeat_timeout_s": 3, "party_timeout_s": 300, "join_timeout_s": 120, "step_timeout_s": 120}
CLIENT = {"heartbeat_s": 0.3, "retry_initial_s": 0.2, "retry_max_s": 2.0, "connect_timeout_s": 5}


def wheel_folder(basetemp: Path) -> Path:
    """One wheel folder per pytest session: shared by pytest-xdist's workers, whose temp folders share a parent."""
    return (basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp) / "vfl-wheel"


@contextlib.contextmanager
def deployed(root: Path, wheel_dir: Path, data: Path, **settings: Any) -> Iterator[Deployment]:
    """The four hosts installed and every daemon started; stopped and the network deleted on leaving."""
    wheel = build_wheel(wheel_dir)
    with Network(HOST_NAMES) as network:
        deployment = Deployment(
            root,
            network,
            wheel,
            data,
            server={**SERVER, **settings.pop("server", {})},
            client={**CLIENT, **settings.pop("client", {})},
            **settings,
        )
        try:
            deployment.start()
            yield deployment
        finally:
            deployment.stop()


def finish(deployment: Deployment, console: Console, job_id: str, timeout_s: float = 300) -> dict[str, Any]:
    """Wait for ``job_id`` to end and return its record; fail, with every host's log tail, unless it finished."""
    ended = ("finished", "failed", "cancelled")
    deployment.wait_for(lambda: console.job(job_id)["state"] in ended, f"{job_id} to end", timeout_s)
    record = console.job(job_id)
    assert record["state"] == "finished", f"{record}\n{deployment.tail()}"
    return record


def hold(seconds: float) -> None:
    """Wait ``seconds`` of wall-clock time: an outage's length is what the test is about."""
    threading.Event().wait(seconds)


def outage(deployment: Deployment, key: str, seconds: float) -> float:
    """Host ``key``'s link down for ``seconds``; returns when it came back (Unix seconds)."""
    with deployment.network.link_down(key):
        hold(seconds)
    return time.time()


def first_event_after(deployment: Deployment, key: str, names: tuple[str, ...], after: float) -> dict[str, Any] | None:
    """Host ``key``'s first logged event named one of ``names`` at or after Unix time ``after``."""
    for event in deployment.events(key):
        if event.get("event") in names and event_time(event) >= after:
            return event
    return None


class Figures:
    """Each fault's figures, appended to ``FIGURES`` and kept for the test's own assertions."""

    def __init__(self, suite: str) -> None:
        self.suite = suite
        self.rows: list[dict[str, Any]] = []

    def record(self, fault: str, **figures: Any) -> None:
        row = {"suite": self.suite, "fault": fault, **figures, "at": round(time.time(), 1)}
        self.rows.append(row)
        FIGURES.parent.mkdir(parents=True, exist_ok=True)
        with FIGURES.open("a") as out:
            out.write(json.dumps(row) + "\n")


def worst(differences: Mapping[str, float]) -> float:
    """The largest of a job's weight differences (0.0 for none)."""
    return max(differences.values(), default=0.0)


def job_outcome(deployment: Deployment, job_id: str) -> JobOutcome:
    """Every per-step loss (the server's ``summary.json``) and each party's final weights, each
    read from that party's own host (``vfltesting.recovery.job_outcome`` reads one shared run folder)."""
    summary = json.loads((party_dir(deployment.runs("server"), job_id, 1) / "summary.json").read_text())
    hosts = {1: "server", **{p: f"party{p}" for p in PASSIVE}}
    weights = {
        party: tensors(load_checkpoint(party_dir(deployment.runs(key), job_id, party) / LATEST)["algorithm"])
        for party, key in hosts.items()
    }
    return JobOutcome(losses=list(summary["step_losses"]), weights=weights)


def frozen(deployment: Deployment, key: str) -> contextlib.AbstractContextManager[None]:
    """Host ``key``'s daemon stopped (SIGSTOP) inside the block, so what the test checks there holds."""
    return frozen_process(deployment.procs[key])
