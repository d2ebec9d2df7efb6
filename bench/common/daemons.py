"""The long-running deployment the service benches start: ``vfl-server`` and two client daemons.

``vfltesting.service.ServiceRun`` names its processes ``server``, ``party-2`` and ``party-3``;
``make bench-service`` samples each after every job and ``make bench-train-10m`` its peak memory.
"""

from __future__ import annotations

from vfltesting.service import ServiceRun, log_events, wait_until

DAEMONS = ("server", "party-2", "party-3")


def wait_for_daemons(run: ServiceRun) -> None:
    """Until every client daemon has connected (it warmed up first): what "ready" means for job 1."""
    clients = [name for name in DAEMONS if name != "server"]
    wait_until(lambda: all(log_events(run.logs[c], "connected") for c in clients), "the daemons to connect", run)
