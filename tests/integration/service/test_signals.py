"""SIGTERM and SIGINT stop the daemons cleanly, with the documented exit codes (143 and 130)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from vflclient import Connection, JobClient, PassiveParty, ServerUnavailable, VflError
from vflcore.data.tables import read_party_csv
from vflcore.runtime.config import ClientSettings
from vflserver.federation.board import JobBoard
from vflserver.federation.server import build_server
from vflserver.jobs.store import JobStore
from vfltesting.eventually import eventually
from vfltesting.forked import Launcher
from vfltesting.localrun import Daemon, stop_all, wait_for_port
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, finish_job, job_document, log_events, service_env, wait_until

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


class TestSignals:
    @pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["TERM", "INT"])
    def test_server_waiting_for_parties_stops_cleanly(
        self, pki: Pki, digits_data: Path, tmp_path: Path, forked_daemons: Launcher, signum: int, code: int
    ) -> None:
        """A server still waiting for its parties exits with 143 on SIGTERM and 130 on SIGINT.

        Forked (``vfltesting.forked``, ~1 CPU-s a start, not ~6; the exec'd SIGTERM cost 5.9 CPU-s,
        measured 2026-11-29): ``main`` installs the one handler for both before it listens, the
        handler alone picks the code, and the process ends in ``daemon.leave``'s ``os._exit``
        whichever way it started. The console script exec'd, signalled and exiting 0 is ``make demo``'s
        (CI, after ``make test``: the server stopped on SIGTERM, every daemon exited 0).
        """
        log = tmp_path / "server.log"
        command = _server_command(pki, digits_data, tmp_path)
        forked = forked_daemons.start(command, stderr=log, append=False, env=service_env(), cwd=tmp_path)
        try:
            wait_for_port(tmp_path / "port", forked, timeout_s=120)
            forked.send_signal(signum)
            assert forked.wait(timeout=30) == code, log.read_text()
        finally:
            stop_all({"server": forked})
        err = log.read_bytes()
        assert b"stopped by signal" in err

    def test_client_stops_cleanly_and_server_notices(
        self, pki: Pki, digits_data: Path, tmp_path: Path, forked_daemons: Launcher
    ) -> None:
        """A joined client exits 143 on SIGTERM; the server then logs it offline and still stops on its own signal.

        Both passive parties run: a job starts only once every party it names is connected
        (docs/reference/job-states.md, the queue), so party 2 alone would never join. All three
        are forked (``vfltesting.forked``: ~1 CPU-s a start, not ~6; party 2 exec'd cost 5.7 CPU-s,
        measured 2026-11-29): the handler and the code are ``main``'s, and the end is
        ``daemon.leave``'s ``os._exit`` whichever way the process started. A client console script
        exec'd, signalled and exiting is ``make demo``'s (CI); one exec'd with
        ``--once`` and ending on its own, ``test_serving_alone``'s.
        """
        log = tmp_path / "server.log"
        server = forked_daemons.start(
            _server_command(pki, digits_data, tmp_path), stderr=log, append=False, env=service_env(), cwd=tmp_path
        )
        clients: dict[str, Daemon] = {}
        try:
            port = wait_for_port(tmp_path / "port", server, timeout_s=120)
            for party in (2, 3):
                clients[f"party-{party}"] = forked_daemons.start(
                    _client_command(pki, digits_data, tmp_path, port, party),
                    stderr=tmp_path / f"party-{party}.log",
                    append=False,
                    env=service_env(),
                    cwd=tmp_path,
                )
            party2 = clients["party-2"]

            def party_2(event: str) -> bool:
                return any(e.get("peer") == 2 for e in log_events(log, event))

            def online() -> bool:
                assert all(client.poll() is None for client in clients.values()), log.read_text()
                return party_2("party_online")

            # A "did not hang" guard: a daemon's start took over 60 s on a loaded 2-core host.
            eventually(online, "the server logging party 2 online", 180, every=0.1)
            party2.send_signal(signal.SIGTERM)
            # past the stop deadline (45 s) a hung client exits 1 with every thread's stack on stderr
            assert party2.wait(timeout=60) == 143, (tmp_path / "party-2.log").read_text()
            # before the server's own stop: its Finish would make any later close a routine party_left
            eventually(lambda: party_2("party_offline"), "the server logging party 2 offline", 60, every=0.1)
        finally:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=30)
            stop_all(clients)
        assert code == 143, log.read_text()
        assert 2 in [e.get("peer") for e in log_events(log, "party_offline")], log.read_text()


def _server_command(pki: Pki, data: Path, tmp_path: Path) -> list[str]:
    """``vfl-server --once`` waiting for parties 2 and 3 on ``data``, its port written to ``tmp_path / "port"``."""
    files = pki.server_files()
    return (
        [str(BIN / "vfl-server"), "--once", "--listen", "127.0.0.1:0", "--port-file", str(tmp_path / "port")]
        + ["--data", str(data / "party1.csv"), "--ca", str(files.ca), "--cert", str(files.cert)]
        + ["--key", str(files.key), "--run-dir", str(tmp_path / "runs"), "--log-format", "json"]
    )


def _client_command(pki: Pki, data: Path, tmp_path: Path, port: int, party: int) -> list[str]:
    """``vfl-client --once`` for ``party``."""
    files = pki.party_files(party)
    return (
        [str(BIN / "vfl-client"), "--once", "--party", str(party), "--server", f"127.0.0.1:{port}"]
        + ["--data", str(data / f"party{party}.csv"), "--ca", str(files.ca), "--cert", str(files.cert)]
        + ["--key", str(files.key), "--run-dir", str(tmp_path / f"runs-{party}"), "--log-format", "json"]
    )


def _order(log: Path, *names: str) -> list[int]:
    """The index of each named event's first appearance in ``log`` (-1 if it never came)."""
    events = [str(e.get("event")) for e in log_events(log)]
    return [events.index(name) if name in events else -1 for name in names]


def _vfl_jobs_watch(run: ServiceRun, pki: Pki, job_id: str) -> subprocess.Popen[str]:
    """``vfl-jobs watch JOB`` as an operator runs it, its output piped (JSON lines); returns once it has a line."""
    files = pki.operator_files("alice")
    command = [str(BIN / "vfl-jobs"), "--server", run.address, "--ca", str(files.ca), "--cert", str(files.cert)]
    proc = subprocess.Popen(
        [*command, "--key", str(files.key), "watch", job_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("{"), proc.communicate()  # the watch is open: it has replayed
    return proc


class TestServiceStop:
    """The daemons in service mode, stopped by SIGTERM.

    After a stop signal a daemon ends with ``os._exit`` (``vflcore.runtime.daemon.leave``), a forked
    one (``vfltesting.forked``) as an exec'd one: every daemon here is forked (~1 CPU-s a start, not
    ~6), and the console scripts exec'd, stopped by SIGTERM and exiting 0 in service mode are the
    ``make demo``'s (``examples/run_demo.py``, which CI runs after ``make test``).
    """

    def test_server_sigterm_with_a_job_running(self, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
        """SIGTERM while a job trains: it is interrupted with its epochs kept, a queued one stays queued, exit 0.

        Every call that would hold the stop ends when the stop starts, not at gRPC's grace: the
        Watch of the queued job is told the server is shutting down, and party 3, which the
        running job does not need, waits in a NextJob long poll all along. Every daemon warmed
        up before it said it was ready (``warmed_up`` before listening, before dialling out).
        """
        run = ServiceRun(tmp_path, pki, digits_data)
        seen: dict[str, list[str]] = {"stop-running": [], "stop-queued": []}
        refused: dict[str, VflError] = {}

        def watch(jobs: JobClient, job_id: str) -> None:
            try:
                for event in jobs.watch(job_id):
                    seen[job_id].append(event.state)
            except VflError as exc:
                refused[job_id] = exc

        with run.started(), JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            # party 2 only: party 3 stays in its NextJob long poll; the second job queues behind the first
            # 200 epochs at the default batch of 32, not 50 at 8: as long a job (~6,000 steps against
            # ~5,900), its first epoch, which the test waits for, a quarter of the steps (30, not 117).
            jobs.submit(job_document("stop-running", "splitnn", epochs=200, passive_parties=[2]))
            jobs.submit(job_document("stop-queued", "splitnn", epochs=1, passive_parties=[2]))
            wait_until(lambda: jobs.get("stop-running").epochs_done >= 1, "the first epoch", run, every_s=0.05)
            watchers = [threading.Thread(target=watch, args=(jobs, job_id)) for job_id in seen]
            for thread in watchers:
                thread.start()
            wait_until(lambda: all(seen.values()), "both Watch calls to be open", run)
            operators = {job_id: _vfl_jobs_watch(run, pki, job_id) for job_id in seen}
            server = run.procs["server"]
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 0, run.tail()
            for thread in watchers:
                thread.join(timeout=60)
            printed = {job_id: proc.communicate(timeout=120) for job_id, proc in operators.items()}
            assert all(run.alive()[f"party-{p}"] for p in (2, 3)), (
                f"a passive daemon left with the server\n{run.tail()}"
            )
        assert seen["stop-running"][-1] == "interrupted" and "stop-running" not in refused, (seen, refused)
        assert "watch it again once the server is back" in str(refused.get("stop-queued")), (seen, refused)
        assert isinstance(refused["stop-queued"], ServerUnavailable), refused
        # vfl-jobs watch: the interrupted job resumes at the next start, which it says, exit 3, not a failure
        for job_id, proc in operators.items():
            assert proc.returncode == 3, (job_id, printed[job_id])
            assert "failed to connect" not in printed[job_id][1], printed[job_id]
        assert '"state": "interrupted"' in printed["stop-running"][0].splitlines()[-1], printed["stop-running"]
        assert "the server stopped; the job resumes when it restarts" in printed["stop-running"][1]
        assert "watch it again once the server is back" in printed["stop-queued"][1], printed["stop-queued"]
        records = JobStore(tmp_path / "runs" / "jobs.sqlite")
        try:
            running, queued = records.get("stop-running"), records.get("stop-queued")
        finally:
            records.close()
        assert running.state == "interrupted" and running.epochs_done >= 1, running
        assert queued.state == "queued", queued
        for name, ready in (("server", "service_started"), ("party-2", "connected"), ("party-3", "connected")):
            warmed, said = _order(run.logs[name], "warmed_up", ready)
            assert 0 <= warmed < said, f"{name}: warmed_up must come before {ready}\n{run.tail()}"

    def test_server_with_console_and_metrics_stops_cleanly(self, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
        """SIGTERM with ``[console]`` and ``[metrics]`` on: the service stops cleanly and the process exits 0.

        Both hold the service in reference cycles the start-up freeze keeps alive, so the process
        ends with ``os._exit`` once the service has stopped, not in gRPC's exit handler (2 s).
        Forked (``vfltesting.forked``): the stop, the cycles and ``daemon.leave`` are ``main``'s, the
        same in a forked process; an exec'd start costs ~6 CPU-s, a fork ~1 (the file: 39.6 -> 29.0 CPU-s
        with this, the shared server below and the batch of 32 above, paired runs, 2026-11-29). The
        console script exec'd, stopped by SIGTERM and exiting 0 in service mode is ``make demo``'s (CI).
        """
        console = {"console": {"enabled": True, "listen": "127.0.0.1:0"}}
        run = ServiceRun(tmp_path, pki, digits_data, serving=False, metrics=True, server_tables=console)
        try:
            run.start_server()
            run.console_port()
            server = run.procs["server"]
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 0, run.tail()
        finally:
            run.close()
        stopped, ended = _order(run.logs["server"], "service_stopped", "unclean_stop")
        assert stopped >= 0 and ended == -1, run.tail()

    def test_a_client_counts_the_job_it_trained_and_still_serves(
        self, server_and_party_3: ServiceRun, pki: Pki, forked_daemons: Launcher
    ) -> None:
        """SIGTERM to a daemon serving the federated model of the job it trained: "after 1 job(s)", not 0.

        The job's ``run`` never returned (the model was served until the stop), which is how the
        count missed it. Party 2 is forked (``vfltesting.forked``, ~1 CPU-s a start, not ~6): the
        count and the line are ``main``'s; a service-mode client's own exec'd stop and exit code are
        ``make demo``'s (CI: every daemon exits 0).
        """
        run = server_and_party_3
        party_2 = _party_2(run, launcher=forked_daemons)
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs, party_2 as party2:
            finish_job(jobs, run, jobs.submit(job_document("trained-served", "splitnn")).id)
            wait_until(
                lambda: jobs.get("trained-served").serving == "serving", "the model to be served", run, every_s=0.05
            )
            out = _stop(party2, run)
        assert "vfl-client party 2: stopped by signal after 1 job(s)" in out, out

    def test_a_client_stopped_mid_job_names_the_job(
        self, server_and_party_3: ServiceRun, pki: Pki, forked_daemons: Launcher
    ) -> None:
        """SIGTERM to a daemon while its job trains: it says it stopped during that job, not "after 0 job(s)"."""
        run = server_and_party_3
        party_2 = _party_2(run, launcher=forked_daemons)
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs, party_2 as party2:
            # it trains until the stop; a loaded host may take a minute to start both daemons
            job = jobs.submit(job_document("cut-short", "splitnn", epochs=10_000, join_timeout_s=600)).id
            wait_until(lambda: jobs.get(job).state == "training", "the job to train", run, 600, every_s=0.05)
            out = _stop(party2, run)
            jobs.cancel(job)  # the server is shared: no job of this test may wait there for a party 2
        assert "vfl-client party 2: stopped by signal during job cut-short after 0 finished job(s)" in out, out


@pytest.fixture(scope="module")
def server_and_party_3(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """The server and party 3, started once for the two tests that stop a party 2 of their own (``_party_2``).

    Neither test is about the server or party 3, which each test started afresh before (two forked
    starts more, ~1 CPU-s each); each test starts, reads and stops its own party 2, and the second
    cancels its job, so either runs alone or after the other.
    """
    run = ServiceRun(tmp_path_factory.mktemp("stop-counts"), pki, digits_data, parties=(3,))
    with run.started():
        yield run


@contextlib.contextmanager
def _party_2(run: ServiceRun, launcher: Launcher) -> Iterator[Daemon]:
    """``vfl-client --party 2`` on ``run``'s config, forked by ``launcher``; stdout in ``party-2.out``,
    log in ``party-2-own.log``; killed at exit."""
    command = [str(BIN / "vfl-client"), "--party", "2", "--config", str(run.client_config(2, run.address))]
    command += ["--log-format", "json"]
    stdout, stderr = run.root / "party-2.out", run.root / "party-2-own.log"
    party2 = launcher.start(command, stderr=stderr, stdout=stdout, append=False, env=service_env(), cwd=run.root)
    try:
        yield party2
    finally:
        if party2.poll() is None:
            party2.kill()
            party2.wait()


def _stop(party: Daemon, run: ServiceRun) -> str:
    """SIGTERM to ``_party_2``'s daemon; it must exit 0. Returns its stdout."""
    party.send_signal(signal.SIGTERM)
    assert party.wait(timeout=60) == 0, (run.root / "party-2-own.log").read_text()
    return (run.root / "party-2.out").read_text()


class TestClosedUnderIt:
    def test_a_party_whose_connection_its_daemon_closed_stops_as_unavailable(
        self, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """A signal closes the channel under the working thread: its next call is a stop, wherever it was.

        Before, grpc's ValueError ("Channel closed!") escaped from Join, Subscribe or a send, and
        ``vfl-client --once`` exited 1 with a traceback instead of 143.
        """
        server, port = build_server(JobBoard(), "127.0.0.1:0", pki.server_files())
        server.start()
        try:
            connection = Connection(f"127.0.0.1:{port}", 2, tls=pki.party_files(2))
            connection.close()  # what ShutdownSignals does, through PartyDaemon.stop
            party = PassiveParty(
                2, read_party_csv(digits_data / "party2.csv"), ClientSettings(run_dir=tmp_path / "runs")
            )
            with pytest.raises(ServerUnavailable, match="this party is stopping"):
                party.run(connection, job_id="job-a")
            with pytest.raises(ServerUnavailable, match="this party is stopping"), connection.closing_is_stopping():
                connection.next_job(0.1)
        finally:
            server.stop(grace=None)
