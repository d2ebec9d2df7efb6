"""The service on separate hosts: PSI, training, a checkpointed resume and inference, through link faults.

Each party runs on its own host (``vfltesting.hosts``): a network namespace with its own address
and host name, a venv installed from the project's wheel, and a folder holding only its data,
certificates and config, set up as ``docs/tutorials/separate-hosts.md`` ("Installing on a host") says. The
parties dial the server by name; the operator's job and inference calls come from the operator's
host. Faults are set on a host's veth link (down, or slowed with ``tc tbf``), not in a proxy.

Every job is compared with a fault-free run of the same job on the same hosts: per-step losses
and every party's final weights within 1e-6. Each fault's time to recover and weight difference
go to ``vfltesting.hosts.faults.FIGURES``.
"""

from __future__ import annotations

import csv
import itertools
import time
from typing import Any

from vflcore.data.checkpoints import epoch_path, party_dir
from vfltesting.hosts.console import Console
from vfltesting.hosts.deployment import CONTROL_PORT, Deployment
from vfltesting.hosts.faults import (
    EPOCHS,
    JOB,
    LONG_OUTAGE_S,
    MARKS,
    SHORT_OUTAGE_S,
    Figures,
    finish,
    frozen,
    hold,
    job_outcome,
    worst,
)
from vfltesting.hosts.install import installed_from
from vfltesting.recovery import JobOutcome, assert_same_model, weight_differences
from vfltesting.service import job_document

pytestmark = MARKS


def _train(hosts: Deployment, console: Console, job_id: str, algorithm: str = "splitnn") -> dict[str, Any]:
    assert console.submit(job_document(job_id, algorithm, epochs=EPOCHS, **JOB)) == job_id
    return finish(hosts, console, job_id)


def test_each_host_runs_its_own_install_and_reaches_the_others_only_over_the_switch(hosts: Deployment) -> None:
    """The project comes from each host's venv; a party cannot reach the server over its own loopback."""
    for key in hosts.network.hosts:
        where = installed_from(hosts.bins[key], hosts.host(key).command([]))
        assert where.is_relative_to(hosts.folder(key) / "venv"), (key, where)
    assert sorted(p.name for p in (hosts.folder("party3") / "certs").iterdir()) == [
        "ca.pem",
        "party-3.key",
        "party-3.pem",
    ]
    shown = hosts.run_on("operator", ["vfl-certs", "show", str(hosts.folder("server") / "certs/server.pem")])
    assert hosts.host("server").name in shown.stdout, shown.stdout
    probe = f"import socket; socket.create_connection(('127.0.0.1', {CONTROL_PORT}), timeout=3)"
    refused = hosts.run_on("party3", ["python", "-c", probe])
    assert refused.returncode != 0 and "ConnectionRefusedError" in refused.stderr, refused.stderr


def test_a_job_resumes_from_its_checkpoints_after_the_server_host_crashes(
    hosts: Deployment, console: Console, clean: JobOutcome
) -> None:
    """kill -9 of vfl-server inside epoch 2 (party 3 frozen there), then a restart on its host: same model."""
    job_id = "server-crash"
    assert console.submit(job_document(job_id, "splitnn", epochs=EPOCHS, **JOB)) == job_id
    hosts.wait_for(lambda: console.job(job_id)["epochs_done"] >= 1, f"epoch 1 of {job_id}")
    with frozen(hosts, "party3"):
        seen = console.job(job_id)["epochs_done"]
        assert seen < EPOCHS and not epoch_path(party_dir(hosts.runs("party3"), job_id, 3), seen).exists()
        hosts.kill("server")
    hosts.start_server()
    finish(hosts, console, job_id)
    resumed = hosts.events("server", "resumed")
    assert resumed and resumed[-1]["job"] == job_id, resumed
    assert_same_model(job_outcome(hosts, job_id), clean)


def _features(hosts: Deployment, rows: int) -> list[list[float]]:
    """The active party's first ``rows`` feature rows, as its own scoring application would send them."""
    with (hosts.folder("server") / "data/party1.csv").open(newline="") as table:
        reader = csv.DictReader(table)
        return [
            [float(v) for k, v in row.items() if k not in ("id", "label")] for row in itertools.islice(reader, rows)
        ]


def test_an_apfed_model_answers_on_the_active_host_with_a_passive_link_down(
    hosts: Deployment, console: Console
) -> None:
    """Active-only inference: APFed-C's model answers from the server's host while party 3's link is down."""
    _train(hosts, console, "alone", "apfed_c")
    features = _features(hosts, 4)
    before = console.call("infer", model="alone", features=features)
    assert "failed" not in before and len(before["outputs"]["label"]) == 4, before
    with hosts.network.link_down("party3"):
        during = console.call("infer", model="alone", features=features)
    assert during["outputs"] == before["outputs"], during


def _ids(hosts: Deployment, job_id: str, count: int) -> list[str]:
    aligned = party_dir(hosts.runs("server"), job_id, 1) / "aligned_ids.csv"
    with aligned.open(newline="") as table:
        return [row[0] for row in itertools.islice(csv.reader(table), 1, count + 1)]


def _burst_through(
    hosts: Deployment, console: Console, model: str, ids: list[str], key: str, seconds: float
) -> tuple[list[dict[str, Any]], float]:
    """Requests one after another while host ``key``'s link is down for ``seconds``, then until one
    answers again; returns the failed replies and the seconds from the link's return to that answer."""
    failures: list[dict[str, Any]] = []
    hosts.network.cut(key)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            reply = console.call("infer", model=model, ids=ids)
            if "failed" in reply:
                failures.append(reply)
            hold(0.2 if "failed" in reply else 0.05)
    finally:
        hosts.network.restore(key)
    restored = time.monotonic()
    while "failed" in (reply := console.call("infer", model=model, ids=ids)):
        assert time.monotonic() - restored < 180, f"{model} did not answer again: {reply}\n{hosts.tail()}"
        hold(0.2)
    return failures, round(time.monotonic() - restored, 2)


def test_a_slow_link_then_link_faults_while_serving(hosts: Deployment, console: Console, clean: JobOutcome) -> None:
    """Party 3 on a 2 Mbit/s link (tc tbf) trains the same model; then, while it is served, party 3's link
    goes down for 5 s and for 30 s (``LONG_OUTAGE_S``), and the server's for 5 s, during bursts of requests by ID."""
    figures = Figures("serving")
    hosts.network.throttle("party3", rate="2mbit", burst="32kbit", latency="400ms")
    try:
        started = time.monotonic()
        _train(hosts, console, "slow")
        slow_s = round(time.monotonic() - started, 1)
    finally:
        hosts.network.unthrottle("party3")
    difference = worst(weight_differences(job_outcome(hosts, "slow"), clean))
    figures.record("party 3 on a 2 Mbit/s tbf link for a whole job", job_seconds=slow_s,
                   max_weight_difference=difference)  # fmt: skip
    assert_same_model(job_outcome(hosts, "slow"), clean)

    ids = _ids(hosts, "slow", 8)
    hosts.wait_for(lambda: console.call("ready", model="slow").get("ready") is True, "the model to be served")
    before = console.call("infer", model="slow", ids=ids)
    assert "failed" not in before, before
    for seconds in (SHORT_OUTAGE_S, LONG_OUTAGE_S):
        failures, recovered = _burst_through(hosts, console, "slow", ids, "party3", seconds)
        figures.record(f"party 3 link down {seconds} s during an inference burst", recover_s=recovered,
                       failed_requests=len(failures))  # fmt: skip
        if seconds >= LONG_OUTAGE_S:  # long enough for the server to notice (heartbeat_timeout_s = 3)
            assert failures, f"no request failed in a {seconds} s outage"
        assert all("party 3" in f["failed"] for f in failures), failures
        assert console.call("infer", model="slow", ids=ids)["outputs"] == before["outputs"]

    failures, recovered = _burst_through(hosts, console, "slow", ids, "server", SHORT_OUTAGE_S)
    figures.record(f"server link down {SHORT_OUTAGE_S} s while serving", recover_s=recovered,
                   failed_requests=len(failures))  # fmt: skip
    # The caller cannot reach the server at all: its error names the server's host.
    assert failures and all(hosts.host("server").name in f["failed"] for f in failures), failures
    assert console.call("infer", model="slow", ids=ids)["outputs"] == before["outputs"]

    listed = [job["id"] for job in console.call("list")["jobs"]]
    assert sorted(listed) == sorted(set(listed)) and "slow" in listed, listed  # no job lost or duplicated
    assert all(hosts.procs[key].poll() is None for key in hosts.procs), hosts.tail()
