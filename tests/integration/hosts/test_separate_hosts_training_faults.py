"""A passive party's link goes down during PSI and during an epoch, for 5 s and for 30 s: same model.

The parties run on separate hosts (``vfltesting.hosts``: a network namespace, a venv installed
from the wheel and a folder each). Party 3's cable is pulled at the switch (``ip link set ...
down`` on its veth's switch end): frames are dropped both ways and no reset is sent, as when a
WAN link dies. Each fault is set on an event: PSI has started and party 3 has no alignment yet,
or the server has recorded an epoch and party 3 has not saved the next one; the party is frozen
(SIGSTOP) while that is checked, so the check still holds when the link goes down. PSI takes
well under a second, so for it party 3 runs in 5 ms slices from the submit on
(``vfltesting.freeze.frozen_when``): a fast host cannot finish PSI between the check and the cut.

Two jobs: 30 s down (``LONG_OUTAGE_S``: the party's connection dies inside it, and it dials
again) during PSI then 5 s inside epoch 2, and 5 s during PSI then 30 s inside epoch 2. Each must end
with the per-step losses and final weights of a fault-free run of the same job on the same
hosts, within 1e-6; the operator sees the job wait for party 3 by name during a
long outage; and the job list holds each job once. Each fault's time to recover (link up to the
server's next ``aligned`` or ``first_step``) and the weight difference go to
``vfltesting.hosts.faults.FIGURES``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from vflcore.data.checkpoints import epoch_path, party_dir
from vfltesting.freeze import frozen_when
from vfltesting.hosts.console import Console
from vfltesting.hosts.deployment import Deployment
from vfltesting.hosts.faults import (
    EPOCHS,
    JOB,
    LONG_OUTAGE_S,
    MARKS,
    SHORT_OUTAGE_S,
    Figures,
    finish,
    first_event_after,
    frozen,
    hold,
    job_outcome,
    worst,
)
from vfltesting.recovery import JobOutcome, assert_same_model, weight_differences
from vfltesting.service import event_time, job_document

pytestmark = MARKS

#: Party 3 frozen at the moment of a fault, for as long as the block that cuts its link.
Moment = Callable[[Deployment], AbstractContextManager[None]]


def _party3(hosts: Deployment, job_id: str) -> Path:
    return party_dir(hosts.runs("party3"), job_id, 3)


def _fault(hosts: Deployment, console: Console, job_id: str, seconds: float, moment: Moment) -> float:
    """Party 3 frozen at ``moment``, its link cut, then thawed: down for ``seconds``.

    During a long outage the operator must see the job wait for party 3, by name. Returns when the
    link came back (Unix seconds).
    """
    with moment(hosts):
        hosts.network.cut("party3")
    started = time.monotonic()
    try:
        if seconds >= LONG_OUTAGE_S:  # a short one may end before the loss is noticed (heartbeat_timeout_s = 3)
            hosts.wait_for(lambda: console.job(job_id)["state"] == "waiting", "the job to wait for party 3", seconds)
            message = console.job(job_id)["state_message"]
            assert message.startswith("waiting for party 3"), message
        hold(seconds - (time.monotonic() - started))
    finally:
        hosts.network.restore("party3")
    return time.time()


def _during_psi(hosts: Deployment, console: Console, job_id: str, seconds: float) -> float:
    """Once the server has started PSI, and party 3 holds no alignment yet: its link down for ``seconds``."""
    before = len(hosts.events("server", "psi_started"))
    assert console.submit(job_document(job_id, "splitnn", epochs=EPOCHS, **JOB)) == job_id

    def moment(hosts: Deployment) -> AbstractContextManager[None]:
        # PSI on the digits takes well under a second: party 3 runs in slices from the submit
        # on, so it cannot finish PSI between the server's psi_started and the cut (frozen_when)
        return frozen_when(
            hosts.procs["party3"],
            hosts.logged("server", "psi_started", before + 1),
            lambda: any((_party3(hosts, job_id) / "psi").glob("alignment-*")),
            f"PSI of {job_id} started, party 3's unfinished",
        )

    return _fault(hosts, console, job_id, seconds, moment)


def _inside_epoch(hosts: Deployment, console: Console, job_id: str, seconds: float, done: int = 1) -> float:
    """Once the server has recorded ``done`` epochs, and party 3 has not saved the next: its link down."""
    hosts.wait_for(lambda: console.job(job_id)["epochs_done"] >= done, f"epoch {done} of {job_id}")

    @contextlib.contextmanager
    def moment(hosts: Deployment) -> Iterator[None]:
        # an epoch takes seconds: the milliseconds from the wait to the freeze cannot end it
        with frozen(hosts, "party3"):
            seen = console.job(job_id)["epochs_done"]
            assert seen < EPOCHS and not epoch_path(_party3(hosts, job_id), seen).exists(), "the epochs ran out"
            yield

    return _fault(hosts, console, job_id, seconds, moment)


def _recovered(hosts: Deployment, event: str, restored: float) -> float:
    """Seconds from the link's return to the server's next ``event``."""
    found: list[dict[str, Any]] = []

    def logged() -> bool:
        event_found = first_event_after(hosts, "server", (event,), restored)
        found.extend([event_found] if event_found else [])
        return bool(found)

    hosts.wait_for(logged, f"the server's {event} after the link came back")
    return round(event_time(found[0]) - restored, 2)


@pytest.mark.parametrize(
    ("psi_s", "epoch_s"),
    [(LONG_OUTAGE_S, SHORT_OUTAGE_S), (SHORT_OUTAGE_S, LONG_OUTAGE_S)],
    ids=["psi-long-epoch-short", "psi-short-epoch-long"],
)
def test_party_link_down_during_psi_and_an_epoch(
    hosts: Deployment, console: Console, clean: JobOutcome, psi_s: float, epoch_s: float
) -> None:
    figures = Figures("training")
    job_id = f"link-psi{psi_s}-epoch{epoch_s}"
    restored = _during_psi(hosts, console, job_id, psi_s)
    psi_recovery = _recovered(hosts, "aligned", restored)
    restored = _inside_epoch(hosts, console, job_id, epoch_s)
    epoch_recovery = _recovered(hosts, "first_step", restored)
    finish(hosts, console, job_id)
    faulty = job_outcome(hosts, job_id)
    difference = worst(weight_differences(faulty, clean))
    figures.record(f"party 3 link down {psi_s} s during PSI", recover_s=psi_recovery, job=job_id)
    figures.record(f"party 3 link down {epoch_s} s inside epoch 2", recover_s=epoch_recovery, job=job_id,
                   max_weight_difference=difference)  # fmt: skip
    assert_same_model(faulty, clean)
    listed = console.call("list")["jobs"]
    ids = [job["id"] for job in listed]
    assert sorted(ids) == sorted(set(ids)) and job_id in ids, ids  # each job once
    assert all(job["state"] == "finished" for job in listed), [(job["id"], job["state"]) for job in listed]
