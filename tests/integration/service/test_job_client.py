"""``JobClient`` and ``vfl-jobs`` against a real service in this process (port 0, mTLS, operator "alice").

One service serves the module. Before it starts, job "done" is submitted through the service's own
submit path and then written to its job store as finished after 2 epochs (a run to the end needs
passive daemons; tests/integration/service/test_service.py does that with processes). Once it runs, two real
jobs name party 4, which never connects: "broke" fails after its 0.5 s join timeout, and "blocker"
waits ``queued`` for it for ten minutes. No party's daemon runs, so every job submitted after them
stays ``queued`` too, until its parties connect. Tests
that submit use their own job ids and never make a job finish or fail, so "done" stays the only
finished job and "broke" the only failed one, whatever order the tests run in.

The server has a ``[data]`` table (the dataset "default") beside ``[datasets] digits``: a ``JobSpec``
cannot name a dataset, so its document asks for "default" for every party.
"""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from vflclient import JobClient, JobSpec, TlsFiles, jobs_cli
from vflclient._jobs import job_document as sdk_document
from vflcore.errors import ConfigError, DuplicateJob, JobNotFound, JobStateError, PermissionDenied
from vflcore.runtime.config import server_config_from
from vflserver.jobs.app import Service
from vflserver.jobs.store import EpochRecord
from vfltesting.eventually import eventually
from vfltesting.pki import Pki
from vfltesting.proxy import CuttableProxy
from vfltesting.service import job_document, toml_text

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

#: The finished job's epochs, as the runner would have recorded them.
DONE_EPOCHS = [
    EpochRecord(0, 0.5, 0.4, {"accuracy": 0.85}, 1.0, 2_000_000),
    EpochRecord(1, 0.3, 0.35, {"accuracy": 0.9}, 1.5, 2_000_000),
]
#: How long "blocker" waits for party 4: longer than the module runs.
BLOCKER_WAIT_S = 600.0
BROKE = job_document("broke", "splitnn", passive_parties=[4], join_timeout_s=0.5)


def _config(root: Path, data: Path, pki: Pki | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server": {"listen": "127.0.0.1:0", "run_dir": str(root / "runs")},
        "data": {"path": str(data / "party1.csv")},
        "datasets": {"digits": {"path": str(data / "party1.csv")}},
    }
    if pki is not None:
        files = pki.server_files()
        config["tls"] = {"ca": str(files.ca), "cert": str(files.cert), "key": str(files.key)}
    return config


def _write_finished_job(service: Service) -> None:
    """Job "done": submitted as the server submits a job, then moved through the store as the runner would."""
    service.submit(job_document("done", "splitnn", epochs=2), submitter="alice")
    store = service.store
    store.set_state("done", "aligning", "waiting for parties [2, 3], then PSI")
    store.set_state("done", "training", "1000 common IDs (PSI)")
    for epoch in DONE_EPOCHS:
        store.record_epoch("done", epoch)
    store.set_state("done", "finished", "trained and evaluated", final_metrics={"accuracy": 0.9})


@pytest.fixture(scope="module")
def service(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The module's service with "done" (finished), "broke" (failed) and "blocker" (queued) in its store.

    No party's daemon runs: "broke" and "blocker" wait for party 4 to connect, and "broke" fails
    after its join_timeout_s of 0.5 s.
    """
    service = Service(server_config_from(_config(tmp_path_factory.mktemp("job-client"), digits_data, pki)))
    try:
        _write_finished_job(service)  # before start(): the runner cannot take it while it is queued
        service.start()
        with structlog.testing.capture_logs() as logs, _client(service, pki.operator_files("alice")) as jobs:
            jobs.submit(BROKE)
            jobs.submit(job_document("blocker", "splitnn", passive_parties=[4], join_timeout_s=BLOCKER_WAIT_S))
            assert jobs.wait("broke").state == "failed"
            for event in jobs.watch("blocker"):
                if event.message.startswith("party 4 is not connected"):
                    break
            # After that event the runner logs once more (job_held), then nothing about it until the
            # service stops; wait for that line here, or it may land in a later test's captured stdout.
            held = [{"event": "job_held", "job": "blocker"}]
            eventually(
                lambda: any(e["event"] == "job_held" and e["job"] == "blocker" for e in logs),
                f"{held} in the logs",
                10,
                explain=lambda: str(logs),
            )
        yield service
    finally:
        service.stop(grace_s=0)


def _client(service: Service, tls: TlsFiles) -> JobClient:
    return JobClient(f"127.0.0.1:{service.port}", tls=tls, connect_timeout_s=5)


@pytest.fixture
def client(service: Service, pki: Pki) -> Iterator[JobClient]:
    with structlog.testing.capture_logs(), _client(service, pki.operator_files("alice")) as jobs:
        yield jobs


class TestJobClient:
    def test_get_converts_the_job(self, client: JobClient) -> None:
        """Get's JobInfo becomes a Job: 0 times are None, the document is parsed, the history kept."""
        broke = client.get("broke")
        assert (broke.state, broke.ended, broke.epochs_done, broke.submitter) == ("failed", True, 0, "alice")
        assert "party 4" in broke.error
        assert broke.started_at is None and broke.ended_at is not None  # it failed while queued
        assert broke.document == BROKE
        done = client.get("done")
        assert (done.state, done.epochs_done, done.epochs, done.final_metrics) == ("finished", 2, 2, {"accuracy": 0.9})
        assert [e.epoch for e in done.history] == [0, 1]
        assert [(e.train_loss, e.test_loss, e.metrics) for e in done.history] == [
            (0.5, 0.4, {"accuracy": 0.85}),
            (0.3, 0.35, {"accuracy": 0.9}),
        ]
        assert (done.history[1].seconds, done.history[1].wire_bytes) == (1.5, 2_000_000)
        queued = client.submit(job_document("new", "splitnn", epochs=2))
        assert (queued.state, queued.started_at, queued.ended_at, queued.ended) == ("queued", None, None, False)

    def test_watch_knows_the_planned_epochs(self, client: JobClient) -> None:
        """Watch's events carry the job's epochs, so they read "epoch 1/2"."""
        events = list(client.watch("done"))
        assert [(e.kind, e.state) for e in events] == [
            ("state", "queued"),
            ("state", "aligning"),
            ("state", "training"),
            ("epoch", "training"),
            ("epoch", "training"),
            ("state", "finished"),
        ]
        assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6] and all(e.epochs == 2 for e in events)
        assert str(events[3]) == "done epoch 1/2 train_loss 0.5 test_loss 0.4 accuracy 0.85 (1.0 s)"
        assert events[-1].final_metrics == {"accuracy": 0.9} and events[0].epoch is None
        assert str(events[0]) == "done state queued: submitted by alice"

    def test_watch_a_failed_job(self, client: JobClient) -> None:
        """The events of a job that failed end with the failure and its reason."""
        events = list(client.watch("broke"))
        assert [e.state for e in events] == ["queued", "queued", "failed"]
        assert events[1].message.startswith("party 4 is not connected")
        assert "party 4" in events[-1].message and not events[-1].final_metrics

    def test_wait_returns_the_ended_job(self, client: JobClient) -> None:
        """wait() drains the events and returns the job as it ended."""
        assert client.wait("done").state == "finished"
        assert client.wait("broke").state == "failed"

    def test_wait_follows_a_job_until_it_ends(self, client: JobClient) -> None:
        """wait() on a live job returns once it ends: here a queued job cancelled while the client waits."""
        client.submit(job_document("waited-on", "splitnn"))
        canceller = threading.Timer(0.1, client.cancel, args=("waited-on",))
        canceller.start()
        try:
            ended = client.wait("waited-on")
        finally:
            canceller.join()
        assert ended.state == "cancelled" and ended.error == "cancelled by alice before it started"

    def test_list_filters_by_state(self, client: JobClient) -> None:
        """list() passes the states on; jobs come back newest first, as Jobs without history."""
        assert [j.id for j in client.list(["failed"])] == ["broke"]
        assert [j.id for j in client.list(["finished", "failed"])] == ["broke", "done"]
        everything = client.list()
        assert [j.id for j in everything][-3:] == ["blocker", "broke", "done"]  # the oldest three
        assert all(j.history == [] for j in everything)
        assert [j.id for j in client.list(limit=1)] == [everything[0].id]

    @pytest.mark.parametrize(
        ("call", "error", "text"),
        [
            (lambda c: c.get("nope"), JobNotFound, r"Get: no job with ID 'nope' .*\(NOT_FOUND\)"),
            (lambda c: next(c.watch("nope")), JobNotFound, "no job with ID 'nope'"),
            (
                lambda c: c.submit(job_document("done", "splitnn")),
                DuplicateJob,
                r"ID 'done' was already submitted \(it is finished\)",
            ),
            (lambda c: c.submit(job_document("x", "splitnn", epochs=0)), ConfigError, "epochs = 0; give a whole"),
            (
                lambda c: c.submit(job_document("x", "splitnn", dataset="census")),
                ConfigError,
                "has no dataset 'census'",
            ),
            (lambda c: c.cancel("done"), JobStateError, r"has already ended \(finished\)"),
        ],
        ids=["get-unknown", "watch-unknown", "duplicate-id", "zero-epochs", "unknown-dataset", "cancel-ended"],
    )
    def test_statuses_become_errors(
        self,
        client: JobClient,
        service: Service,
        call: Callable[[JobClient], object],
        error: type[Exception],
        text: str,
    ) -> None:
        """Each Control status becomes its own VflError, with the server's message; the store is unchanged."""
        before = service.store.list()
        with pytest.raises(error, match=text):
            call(client)
        assert service.store.list() == before

    def test_cancel_a_queued_job_then_again(self, client: JobClient) -> None:
        """cancel() returns the job cancelled; cancelling it again is FAILED_PRECONDITION, a JobStateError."""
        client.submit(job_document("cancel-twice", "splitnn"))
        cancelled = client.cancel("cancel-twice")
        assert (cancelled.state, cancelled.ended) == ("cancelled", True)
        with pytest.raises(JobStateError, match=r"Cancel: job 'cancel-twice' has already ended \(cancelled\)"):
            client.cancel("cancel-twice")

    def test_a_party_certificate_is_permission_denied(self, service: Service, pki: Pki) -> None:
        """A party's certificate reaches the server but not the Control API: PermissionDenied."""
        with structlog.testing.capture_logs(), _client(service, pki.party_files(2)) as jobs:
            with pytest.raises(PermissionDenied, match=r"Get: the Control API takes operator certificates only"):
                jobs.get("done")
            with pytest.raises(PermissionDenied, match="operator certificates only"):
                jobs.list()

    def test_submit_sends_the_document(self, client: JobClient, service: Service) -> None:
        """submit() sends the JobSpec's document as JSON; the server stores it as sent, under the operator."""
        spec = JobSpec("spec-2", epochs=2)
        job = client.submit(spec)
        stored = service.store.get("spec-2")
        assert stored.document == sdk_document(spec) and stored.document["job"]["job_id"] == "spec-2"
        assert (stored.submitter, stored.epochs, stored.state) == ("alice", 2, "queued")
        assert job.document == stored.document


@pytest.fixture
def insecure_service(digits_data: Path, tmp_path: Path) -> Iterator[Service]:
    """A plaintext service (``vfl-server --insecure``); no job in it."""
    service = Service(server_config_from(_config(tmp_path, digits_data, None)), insecure=True)
    service.start()
    try:
        yield service
    finally:
        service.stop(grace_s=0)


class TestInsecure:
    def test_insecure_warns(self, insecure_service: Service) -> None:
        """insecure=True logs a warning that says development only, and reaches a plaintext server."""
        with (
            structlog.testing.capture_logs() as logs,
            JobClient(f"127.0.0.1:{insecure_service.port}", insecure=True, connect_timeout_s=5) as jobs,
        ):
            assert jobs.list() == []
        assert logs[0]["log_level"] == "warning" and "development only" in logs[0]["warning"]

    @pytest.mark.usefixtures("restore_logging")
    def test_vfl_jobs_insecure(self, insecure_service: Service, capsys: pytest.CaptureFixture[str]) -> None:
        """--insecure needs no certificate and warns on stderr."""
        argv = ["--insecure", "--server", f"127.0.0.1:{insecure_service.port}", "--log-level", "error", "list"]
        capsys.readouterr()  # the service's own start-up logs
        assert jobs_cli.main(argv) == 0
        captured = capsys.readouterr()
        assert captured.out.split() == ["ID", "ALGORITHM", "STATE", "EPOCHS", "SUBMITTER", "SUBMITTED", "METRIC"]
        assert "vfl-jobs: WARNING: --insecure" in captured.err


@pytest.mark.usefixtures("restore_logging")
class TestCommandsOverTheWire:
    @pytest.fixture(autouse=True)
    def _server(self, service: Service, pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
        capsys.readouterr()  # what the service logged if it started for this test
        files = pki.operator_files("alice")
        self.options = ["--server", f"127.0.0.1:{service.port}", "--ca", str(files.ca)]
        self.options += ["--cert", str(files.cert), "--key", str(files.key), "--log-level", "error"]

    def run(self, *argv: str) -> int:
        return jobs_cli.main([*self.options, *argv])

    def test_watch_a_finished_job(self, capsys: pytest.CaptureFixture[str]) -> None:
        """watch on a pipe prints JSON lines and exits 0 when the job finished."""
        assert self.run("watch", "done") == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [line["seq"] for line in lines] == [1, 2, 3, 4, 5, 6]
        assert lines[3]["epoch"]["epoch"] == 0 and lines[3]["epochs"] == 2
        assert lines[-1]["state"] == "finished" and lines[-1]["final_metrics"] == {"accuracy": 0.9}

    def test_watch_says_so_when_the_server_goes_away(
        self, service: Service, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A connection that ends mid-watch without the server's stop (a crash, the network): said in words, exit 3."""
        printed = threading.Event()

        class Out(io.StringIO):
            def write(self, text: str) -> int:
                printed.set()
                return super().write(text)

        monkeypatch.setattr(sys, "stdout", Out())
        codes: list[int] = []
        with CuttableProxy(("127.0.0.1", service.port)) as proxy:
            options = [*self.options, "--server", proxy.address]
            watcher = threading.Thread(target=lambda: codes.append(jobs_cli.main([*options, "watch", "blocker"])))
            watcher.start()
            assert printed.wait(30), capsys.readouterr().err  # the watch has replayed the job's events
            proxy.cut()  # what the operator's side of a server crash looks like: the socket closes
            watcher.join(30)
        err = capsys.readouterr().err
        assert codes == [3], err
        assert "lost the connection to the server while job blocker was not over" in err, err
        assert "`vfl-jobs watch blocker` follows it then" in err and "UNAVAILABLE" not in err, err

    def test_watch_a_failed_job(self, capsys: pytest.CaptureFixture[str]) -> None:
        """watch exits 1 when the job failed; the last line says why."""
        assert self.run("watch", "broke") == 1
        last = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert last["state"] == "failed" and "party 4" in last["message"]

    def test_submit_prints_the_id(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], service: Service) -> None:
        """submit prints the new job's id; the job is queued under it."""
        path = tmp_path / "job.toml"
        path.write_text(toml_text(job_document("digits-1", "splitnn", epochs=3)))
        assert self.run("submit", str(path)) == 0
        assert capsys.readouterr().out == "digits-1\n"
        assert service.store.get("digits-1").state == "queued"

    def test_server_refusals(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown job or a refused cancel prints the server's reason and exits 1; a refused document exits 2."""
        assert self.run("show", "nope") == 1
        assert (
            "vfl-jobs: Get: no job with ID 'nope' in the job store; list the jobs to see their IDs (NOT_FOUND)\n"
            in capsys.readouterr().err
        )
        assert self.run("cancel", "done") == 1
        assert "has already ended (finished)" in capsys.readouterr().err
        path = tmp_path / "bad.toml"
        path.write_text(toml_text(job_document("bad", "splitnn", dataset="census")))
        assert self.run("submit", str(path)) == 2
        assert "has no dataset 'census'" in capsys.readouterr().err

    def test_list_and_show(self, capsys: pytest.CaptureFixture[str]) -> None:
        """list prints a table (or JSON lines), show every field."""
        assert self.run("list", "--state", "finished") == 0
        _, row = capsys.readouterr().out.splitlines()
        assert row.startswith("done") and "2/2" in row and row.endswith("accuracy 0.9")
        assert self.run("list", "--json", "--state", "failed") == 0
        assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["broke"]
        assert self.run("show", "done") == 0
        text = capsys.readouterr().out
        assert "state         finished" in text and "final metrics accuracy 0.9" in text
        assert "EPOCH  TRAIN_LOSS  TEST_LOSS  ACCURACY" in text

    def test_every_command_speaks_json(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--json on submit, list, show and watch: one JSON document, or one JSON line per job or event.

        ``watch --json`` prints JSON lines even where stdout is a terminal (a script under ``script(1)``).
        """
        path = tmp_path / "job.toml"
        path.write_text(toml_text(job_document("digits-json", "splitnn", epochs=3)))
        assert self.run("submit", str(path), "--json") == 0
        submitted = json.loads(capsys.readouterr().out)
        assert submitted["id"] == "digits-json" and submitted["state"] == "queued"
        assert self.run("show", "done", "--json") == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["state"] == "finished" and shown["final_metrics"] == {"accuracy": 0.9}
        assert [h["epoch"] for h in shown["history"]] == [0, 1]
        assert self.run("list", "--json") == 0
        listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert {"done", "broke", "digits-json"} <= {job["id"] for job in listed}
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
        assert self.run("watch", "done", "--json") == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [e["seq"] for e in events] == [1, 2, 3, 4, 5, 6] and events[-1]["state"] == "finished"
        assert self.run("cancel", "digits-json", "--json") == 0
        cancelled = json.loads(capsys.readouterr().out)
        assert cancelled["id"] == "digits-json" and cancelled["state"] == "cancelled"
