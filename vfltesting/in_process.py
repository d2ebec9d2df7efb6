"""A real active party served from this process: its gRPC server on port 0 over mTLS, its job in a thread.

The integration tests connect real ``Connection`` objects (or raw stubs) to it, with certificates
from the session PKI, and run passive parties in threads beside it; ``vfltesting.equivalence``
trains whole jobs this way. The fixtures that stop what these start at teardown are in
``tests/integration/conftest.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import grpc

from vflclient import Connection, PassiveParty, RunResult, read_party_csv
from vflcore.job.spec import JobSpec
from vflcore.runtime.config import ClientSettings, ServerSettings, server_config_from
from vflserver.federation.board import JobBoard
from vflserver.federation.server import build_server
from vflserver.jobs.app import Service
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
from vflserver.training.reports import RunSummary
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki

__all__ = [
    "CuttableParty",
    "RunningJob",
    "play_parties",
    "run_party_in_thread",
    "run_whole_job",
    "start_job",
    "start_service",
    "stop_job",
]


@dataclass
class RunningJob:
    """An active party serving on 127.0.0.1:``port`` with its job running in a thread."""

    active: ActiveParty
    server: grpc.Server
    port: int
    thread: threading.Thread
    outcome: dict[str, Any] = field(default_factory=dict)
    #: The passive parties ``run_party_in_thread`` started, by id (their algorithm once trained).
    passive: dict[int, PassiveParty] = field(default_factory=dict)
    #: Their threads, joined at teardown: a party still logging after its test ended would write
    #: to the terminal, between pytest's captures.
    party_threads: list[threading.Thread] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def summary(self, timeout: float = 120) -> RunSummary:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the job did not end in time"
        if "error" in self.outcome:
            raise self.outcome["error"]
        summary: RunSummary = self.outcome["summary"]
        return summary


def start_job(
    pki: Pki,
    data: Path,
    tmp_path: Path,
    job: JobSpec = SMALL_JOB,
    *,
    join_timeout_s: float = 60,
    keep_serving: bool = False,
    label_column: str | None = "label",
    step_timeout_s: float = 60,
    **kwargs: Any,
) -> RunningJob:
    """Serve ``data/party1.csv`` as the active party; ``kwargs`` go to its ``JobPlan``, its ``ServerSettings``,
    or ``ActiveParty`` itself."""
    table = read_party_csv(data / "party1.csv", label_column=label_column)
    names = {f.name for f in fields(ServerSettings)}
    settings = ServerSettings(
        run_dir=tmp_path / "runs", step_timeout_s=step_timeout_s, **{k: v for k, v in kwargs.items() if k in names}
    )
    planned = {f.name for f in fields(JobPlan)}
    plan = JobPlan(job, **{k: v for k, v in kwargs.items() if k in planned})
    active = ActiveParty(plan, table, settings, **{k: v for k, v in kwargs.items() if k not in names | planned})
    server, port = build_server(JobBoard.single(active.parties), "127.0.0.1:0", pki.server_files())
    server.start()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["summary"] = active.run(join_timeout_s=join_timeout_s, keep_serving=keep_serving)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return RunningJob(active, server, port, thread, outcome)


def stop_job(running: RunningJob) -> None:
    """Stop ``running``'s job, parties and server, and wait for its threads (a test's teardown).

    The joins return as soon as each thread ends; their 60 s limit only guards against a hang.
    """
    running.active.stop_event.set()
    running.active.parties.abort(RuntimeError("test over"))
    running.server.stop(grace=None)
    for thread in [running.thread, *running.party_threads]:
        thread.join(60)


def run_party_in_thread(
    job: RunningJob, pki: Pki, data: Path, tmp_path: Path, party: int, *, device: str = "cpu"
) -> Callable[[], RunResult | BaseException]:
    """Start passive party ``party`` on ``device`` in a thread; the returned function waits for its result."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            table = read_party_csv(data / f"party{party}.csv")
            with Connection(job.address, party, tls=pki.party_files(party), connect_timeout_s=20) as conn:
                job.passive[party] = PassiveParty(
                    party, table, ClientSettings(run_dir=tmp_path / "runs", device=device)
                )
                box["result"] = job.passive[party].run(conn)
        except BaseException as exc:
            box["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    job.party_threads.append(thread)

    def wait(timeout: float = 120) -> RunResult | BaseException:
        thread.join(timeout)
        assert not thread.is_alive(), f"party {party} did not finish in time"
        result: RunResult | BaseException = box["result"]
        return result

    return wait


def play_parties(
    job: RunningJob, pki: Pki, parties: Mapping[int, PassiveParty]
) -> Callable[[float], dict[int, RunResult | BaseException]]:
    """Run each given passive party against ``job``, each in its own thread; the returned function
    joins them (failing if one is still running after ``timeout``) and gives each party's result."""
    results: dict[int, RunResult | BaseException] = {}

    def play(party: int) -> None:
        try:
            with Connection(job.address, party, tls=pki.party_files(party), connect_timeout_s=20) as conn:
                results[party] = parties[party].run(conn)
        except BaseException as exc:
            results[party] = exc

    threads = [threading.Thread(target=play, args=(p,), daemon=True) for p in parties]
    for thread in threads:
        thread.start()

    def wait(timeout: float = 60) -> dict[int, RunResult | BaseException]:
        for thread in threads:
            thread.join(timeout)
        assert not any(t.is_alive() for t in threads), "a passive party did not finish in time"
        return results

    return wait


def run_whole_job(
    pki: Pki,
    data: Path,
    tmp_path: Path,
    job: JobSpec,
    *,
    top_hidden: tuple[int, ...] = (64,),
    top_dropout: float = 0.0,
    passive_device: str = "cpu",
    **active: Any,
) -> RunningJob:
    """Serve ``job`` and run every passive party to the end; every party must succeed.

    The returned job has finished: ``.summary()`` returns at once, and ``.active.algorithm``
    holds the server's half as it ended. ``active`` goes to ``ActiveParty`` (e.g. ``factories``).
    """
    running = start_job(pki, data, tmp_path, job, top_hidden=top_hidden, top_dropout=top_dropout, **active)
    try:
        waits = [
            run_party_in_thread(running, pki, data, tmp_path, party, device=passive_device)
            for party in job.passive_parties
        ]
        running.summary()
        results = [wait() for wait in waits]
    finally:
        running.server.stop(grace=None)
    assert all(isinstance(r, RunResult) and r.success for r in results), results
    return running


def start_service(pki: Pki, digits_data: Path, run_dir: Path) -> Service:
    """The whole service (``vfl-server``'s Federation and Control on one port) in this process, on port 0."""
    files = pki.server_files()
    config = server_config_from(
        {
            "server": {"listen": "127.0.0.1:0", "run_dir": str(run_dir)},
            "tls": {"ca": str(files.ca), "cert": str(files.cert), "key": str(files.key)},
            "datasets": {"digits": {"path": str(digits_data / "party1.csv")}},
        }
    )
    service = Service(config)
    service.start()
    return service


class CuttableParty:
    """A passive party running in a thread, whose connection the test can cut (``cut``) to take it offline."""

    def __init__(self, address: str, pki: Pki, data: Path, runs: Path, party: int) -> None:
        self.conn = Connection(address, party, tls=pki.party_files(party), connect_timeout_s=20)
        self.party = PassiveParty(party, read_party_csv(data / f"party{party}.csv"), ClientSettings(run_dir=runs))
        self.result: RunResult | BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.party.run(self.conn)
        except BaseException as exc:
            self.result = exc

    def cut(self) -> None:
        """Close the party's connection: to the active party, it has gone."""
        self.conn.close()
