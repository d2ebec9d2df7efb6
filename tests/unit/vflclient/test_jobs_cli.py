"""``vfl-jobs`` and ``JobClient`` without a vfl-server: events, documents, rendering, flags, and arguments.

Every call to the Control API runs against a real service in tests/integration/service/test_job_client.py.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from vflclient import Job, JobClient, JobEvent, JobSpec, ServerUnavailable, TlsFiles, jobs_cli
from vflclient._jobs import EpochMetrics, job_document
from vflcore.errors import ConfigError, TlsConfigError

JOB_FILE = """\
[job]
job_id = "digits-1"
algorithm = "splitnn"
passive_parties = [2, 3]
epochs = 3

[job.datasets]
3 = "digits-2024"

[algorithm]
"""


def epoch_event(epoch: int, *, epochs: int = 3, seq: int = 2) -> JobEvent:
    metrics = EpochMetrics(epoch, 0.41, 0.39, {"accuracy": 0.91}, 1.23, 2_000_000)
    return JobEvent("job-x", seq, 1_700_000_000.0, "epoch", "training", "", metrics, {}, epochs)


def state_event(state: str, message: str = "", *, seq: int = 1, final: dict[str, float] | None = None) -> JobEvent:
    return JobEvent("job-x", seq, 1_700_000_000.0, "state", state, message, None, final or {}, 3)


def a_run() -> list[JobEvent]:
    """A whole job: queued, training, three epochs, finished with final metrics."""
    return [
        state_event("queued", seq=1),
        state_event("training", "1000 common IDs (PSI)", seq=2),
        *(epoch_event(e, seq=3 + e) for e in range(3)),
        state_event("finished", seq=6, final={"accuracy": 0.93}),
    ]


class FakeTty(io.StringIO):
    """A terminal, as far as ``isatty`` can tell."""

    def isatty(self) -> bool:
        return True


class CountingStream(io.StringIO):
    """Counts flushes, to show each JSON line leaves at once."""

    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


class TestJobEvent:
    def test_state_event_json_is_flat(self) -> None:
        """A state event's JSON has neither "epoch" nor an empty "final_metrics"."""
        out = state_event("training", "1000 common IDs").to_json()
        assert out == {
            "job_id": "job-x",
            "seq": 1,
            "at": 1_700_000_000.0,
            "kind": "state",
            "state": "training",
            "message": "1000 common IDs",
            "epochs": 3,
        }
        json.dumps(out)

    def test_epoch_event_json_carries_the_epoch(self) -> None:
        """An epoch event's JSON holds the epoch's numbers as a dict, as the server counts them (from 0)."""
        out = epoch_event(2).to_json()
        assert out["epoch"] == {
            "epoch": 2,
            "train_loss": 0.41,
            "test_loss": 0.39,
            "metrics": {"accuracy": 0.91},
            "seconds": 1.23,
            "wire_bytes": 2_000_000,
        }
        assert "final_metrics" not in out

    def test_finished_event_json_carries_final_metrics(self) -> None:
        """The event that finishes a job carries its final metrics."""
        assert state_event("finished", final={"accuracy": 0.93}).to_json()["final_metrics"] == {"accuracy": 0.93}

    def test_epoch_event_reads_as_one_line(self) -> None:
        """An epoch reads "epoch 3/3" (counting from 1) with its losses, metrics and time."""
        assert str(epoch_event(2)) == "job-x epoch 3/3 train_loss 0.41 test_loss 0.39 accuracy 0.91 (1.2 s)"

    def test_epoch_without_a_known_total(self) -> None:
        """Without the planned epochs, the line names the epoch alone."""
        assert str(epoch_event(2, epochs=0)).startswith("job-x epoch 3 train_loss")

    def test_state_event_reads_as_one_line(self) -> None:
        """A state change reads "job-x state training", with its message and final metrics if any."""
        assert str(state_event("training")) == "job-x state training"
        assert str(state_event("failed", "party 3 is unavailable")) == "job-x state failed: party 3 is unavailable"
        assert str(state_event("finished", final={"accuracy": 0.93})) == "job-x state finished (accuracy 0.93)"


class TestJob:
    def job(self, state: str) -> Job:
        return Job("j", "splitnn", state, "alice", 1.0, None, None, "", 0, 3, {}, {}, [], False)

    def test_ended_states(self) -> None:
        """finished, failed, cancelled and interrupted are ended; queued, aligning and training are not."""
        assert all(self.job(s).ended for s in ("finished", "failed", "cancelled", "interrupted"))
        assert not any(self.job(s).ended for s in ("queued", "aligning", "training"))

    def test_to_json_is_json(self) -> None:
        """``to_json`` gives every field in a form json.dumps takes."""
        assert json.loads(json.dumps(self.job("queued").to_json()))["submitter"] == "alice"


class TestJobDocument:
    def test_from_a_toml_file(self, tmp_path: Path) -> None:
        """A job file's tables become the document, nested tables included."""
        path = tmp_path / "job.toml"
        path.write_text(JOB_FILE)
        document = job_document(path)
        assert document == {
            "job": {
                "job_id": "digits-1",
                "algorithm": "splitnn",
                "passive_parties": [2, 3],
                "epochs": 3,
                "datasets": {"3": "digits-2024"},
            },
            "algorithm": {},
        }
        assert job_document(str(path)) == document

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing job file is a ConfigError that names it."""
        with pytest.raises(ConfigError, match=r"job file .*nope\.toml does not exist"):
            job_document(tmp_path / "nope.toml")

    def test_invalid_toml(self, tmp_path: Path) -> None:
        """A file that is not TOML is a ConfigError that names it."""
        path = tmp_path / "bad.toml"
        path.write_text("[job\nepochs = ")
        with pytest.raises(ConfigError, match=r"job file .*bad\.toml is not valid TOML"):
            job_document(path)

    def test_a_toml_date_is_refused_by_key(self, tmp_path: Path) -> None:
        """A TOML datetime cannot travel as JSON: the error names its key."""
        path = tmp_path / "dated.toml"
        path.write_text("[job]\nepochs = 3\nnot_before = 2025-01-01T00:00:00Z\n")
        with pytest.raises(ConfigError, match=r"job\.not_before is a datetime"):
            job_document(path)

    def test_a_mapping_is_copied_as_plain_json(self) -> None:
        """A document given as a mapping comes back as plain dicts and lists (tuples become lists)."""
        given = {"job": {"passive_parties": (2, 3), "epochs": 2}, "algorithm": {"local_steps": 3}}
        assert job_document(given) == {"job": {"passive_parties": [2, 3], "epochs": 2}, "algorithm": {"local_steps": 3}}

    def test_nan_is_refused_by_key(self) -> None:
        """NaN is not JSON: the error names the key."""
        with pytest.raises(ConfigError, match=r"algorithm\.rho = nan"):
            job_document({"algorithm": {"rho": math.nan}})

    def test_from_a_job_spec(self) -> None:
        """A JobSpec's fields make [job] (not those the active party sets), its options make [algorithm]."""
        spec = JobSpec("spec-1", algorithm="fedbcd", epochs=4, bottom_hidden=(32, 16), algorithm_options={"q": 5})
        document = job_document(spec)
        assert document["algorithm"] == {"q": 5}
        job = document["job"]
        assert job["job_id"] == "spec-1" and job["algorithm"] == "fedbcd" and job["epochs"] == 4
        assert job["bottom_hidden"] == [32, 16] and job["passive_parties"] == [2, 3]
        assert not {"algorithm_options", "num_rows", "num_outputs"} & set(job)
        json.dumps(document)


class TestRendering:
    def test_json_lines(self) -> None:
        """Each event is one JSON line, flushed at once; the last carries the final metrics."""
        stream = CountingStream()
        jobs_cli.render_json_lines(a_run(), stream)
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [line["seq"] for line in lines] == [1, 2, 3, 4, 5, 6]
        assert lines[2]["epoch"]["epoch"] == 0
        assert lines[-1]["state"] == "finished" and lines[-1]["final_metrics"] == {"accuracy": 0.93}
        assert stream.flushes >= len(lines)

    def test_tty_bar_and_state_lines(self) -> None:
        """On a terminal: a bar over the epochs with the last metrics, state changes written above it."""
        stream = FakeTty()
        jobs_cli.render_tty(a_run(), stream)
        text = stream.getvalue()
        assert "3/3" in text and "job-x" in text
        assert "accuracy 0.91" in text  # the bar's postfix
        assert "state training: 1000 common IDs (PSI)" in text
        assert "state finished (accuracy 0.93)" in text

    def test_jobs_table(self) -> None:
        """`list` shows one row per job with its main metric."""
        job = Job(
            "job-x", "splitnn", "finished", "alice", 1.7e9, 1.7e9, 1.7e9, "", 3, 3, {"accuracy": 0.9}, {}, [], True
        )
        header, row = jobs_cli.jobs_table([job]).splitlines()
        assert header.split() == ["ID", "ALGORITHM", "STATE", "EPOCHS", "SUBMITTER", "SUBMITTED", "METRIC"]
        assert row.startswith("job-x") and "3/3" in row and row.endswith("accuracy 0.9")

    def test_job_details(self) -> None:
        """`show` prints every field, the document and the epoch history."""
        history = [EpochMetrics(0, 0.5, 0.6, {"accuracy": 0.8}, 1.0, 1000)]
        job = Job(
            "job-x", "splitnn", "failed", "alice", 1.7e9, 1.7e9, None, "boom", 1, 3, {}, {"job": {}}, history, False
        )
        text = jobs_cli.job_details(job)
        assert "error         boom" in text and "ended         -" in text
        assert "EPOCH  TRAIN_LOSS  TEST_LOSS  ACCURACY" in text
        assert "served        no" in text

    def test_job_details_say_what_a_served_model_can_do_now(self) -> None:
        """`show` prints a served model's state: a federated model waiting for a party says which and why."""
        waiting = "waiting for party 3 (party 3: its connection to the server closed)"
        job = Job("job-x", "splitnn", "finished", "alice", 1.7e9, 1.7e9, 1.7e9, "", 3, 3, {}, {}, [], True, waiting)
        assert f"served        yes, {waiting}" in jobs_cli.job_details(job)
        assert "served        yes, serving" in jobs_cli.job_details(replace(job, serving="serving"))

    def test_job_details_say_why_a_job_is_queued(self) -> None:
        """`show` prints the latest state change's words: a held job names the party it waits for."""
        why = "party 3 is not connected; the job starts once it is, and jobs that do not need it run meanwhile"
        job = Job("job-x", "splitnn", "queued", "alice", 1.7e9, None, None, "", 0, 3, {}, {}, [], False, "", why)
        assert f"message       {why}" in jobs_cli.job_details(job)
        assert "message       -" in jobs_cli.job_details(replace(job, state_message=""))

    def test_job_details_show_a_students_held_out_metrics(self) -> None:
        """`show` of a [distill] job: the student's metrics on their own line, beside the job's; none without one."""
        job = Job(
            "job-x", "splitnn", "finished", "alice", 1.7e9, 1.7e9, 1.7e9, "", 3, 3, {"accuracy": 0.95}, {}, [], True
        )
        assert "student" not in jobs_cli.job_details(job)
        distilled = replace(job, student_metrics={"accuracy": 0.9133, "f1": 0.91})
        text = jobs_cli.job_details(distilled)
        assert "student       job-x-student, the active party alone, on the same rows: accuracy 0.9133 f1 0.91" in text
        assert distilled.to_json()["student_metrics"] == {"accuracy": 0.9133, "f1": 0.91}


class TestCommandLine:
    @pytest.mark.parametrize("command", [[], ["submit"], ["list"], ["show"], ["watch"], ["cancel"]])
    def test_help(self, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        """Every subcommand has --help, which exits 0."""
        with pytest.raises(SystemExit) as exit_:
            jobs_cli.main([*command, "--help"])
        assert exit_.value.code == 0
        assert "usage: vfl-jobs" in capsys.readouterr().out

    @pytest.mark.usefixtures("restore_logging")
    def test_missing_certificate(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        """Without --cert/--key the command says how to get an operator certificate, and exits 2."""
        monkeypatch.delenv("VFL_CERT", raising=False)
        monkeypatch.delenv("VFL_KEY", raising=False)
        assert jobs_cli.main(["list"]) == 2
        assert capsys.readouterr().err == (
            "vfl-jobs: pass --cert/--key (or VFL_CERT/VFL_KEY) with an operator certificate; "
            "make one with: vfl-certs operator NAME\n"
        )

    @pytest.mark.usefixtures("restore_logging")
    def test_unreadable_certificate(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A certificate file that is not there is a configuration error (2) that names the file."""
        code = jobs_cli.main(["list", "--ca", str(tmp_path / "ca.pem"), "--cert", "a.pem", "--key", "a.key"])
        assert code == 2
        assert "ca.pem not found" in capsys.readouterr().err

    def test_connection_flags_before_or_after_the_command(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """--server and friends work on either side of the subcommand; the environment gives defaults."""
        monkeypatch.setenv("VFL_CERT", "env.pem")
        parser = jobs_cli._parser()
        args = parser.parse_args(["--server", "a:1", "list", "--key", "k.key"])
        assert (args.server, args.cert, args.key, args.insecure) == ("a:1", "env.pem", "k.key", False)
        args = parser.parse_args(["--server", "a:1", "watch", "j", "--server", "b:2", "--insecure"])
        assert (args.server, args.insecure) == ("b:2", True)


# ---- JobClient before any call (calls to a real server: tests/integration/service/test_job_client.py) -----


class TestJobClient:
    def test_needs_tls_or_insecure(self) -> None:
        """Neither TLS files nor insecure=True is a programming error, refused at once."""
        with pytest.raises(ValueError, match="TLS files are required"):
            JobClient("127.0.0.1:1")

    def test_unreachable_server(self, tmp_path: Path) -> None:
        """A server that does not answer in time is ServerUnavailable naming the address."""
        with structlog.testing.capture_logs(), pytest.raises(ServerUnavailable, match=r"127\.0\.0\.1:1 within"):
            JobClient("127.0.0.1:1", insecure=True, connect_timeout_s=0.2)

    def test_bad_tls_files(self, tmp_path: Path) -> None:
        """TLS files that are not there fail before any connection, naming the file."""
        with pytest.raises(TlsConfigError, match="not found"):
            JobClient("127.0.0.1:1", tls=TlsFiles(tmp_path / "ca.pem", tmp_path / "a.pem", tmp_path / "a.key"))


def test_a_job_spec_names_its_dataset_through_submit_s_argument() -> None:
    """A ``JobSpec`` has no dataset field; ``dataset=`` puts one in the document's ``[job]``."""
    document = job_document(JobSpec(job_id="spec", epochs=2), dataset="digits")
    assert document["job"]["dataset"] == "digits" and document["job"]["epochs"] == 2
