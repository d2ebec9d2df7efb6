"""The service as a user runs it: daemons started once, jobs submitted and followed through the SDK and CLI.

``vfl-server`` and two ``vfl-client`` daemons run as OS processes over mTLS (``vfltesting.service``).
The tests in ``TestOneSetOfDaemons`` share one set of daemons, in order, which is itself part of
what they show: no daemon restarts between jobs, whatever the previous job's outcome.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vflclient import InferenceClient, JobClient
from vflserver.inference.federated import IDS
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, job_document, log_events, toml_text, wait_until, watch_until

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(600)


#: A job whose only part in a test is to run, on the daemons a failure, a cancel or a restart left:
#: PSI only, which takes every party through the queue, Join and PSI to "finished" without the
#: training, evaluation, export and serving that other jobs here cover. Measured 2026-11-29 over the
#: three daemons: 1.4 CPU-s a PSI-only job, 2.2 a one-epoch one; five such jobs here.
NEXT: dict[str, object] = {"psi_only": True}


def _jobs(run: ServiceRun, pki: Pki) -> JobClient:
    return JobClient(run.address, tls=pki.operator_files("alice"))


def _run_to_end(jobs: JobClient, document: dict[str, dict[str, object]]) -> tuple[str, list[str]]:
    """Submit, watch to the end; returns the final state and the event lines."""
    job = jobs.submit(document)
    lines = [str(event) for event in jobs.watch(job.id)]
    return jobs.get(job.id).state, lines


@pytest.fixture(scope="module")
def daemons(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """One server and parties 2 and 3, started once for every test of the class below."""
    with ServiceRun(tmp_path_factory.mktemp("service"), pki, digits_data).started() as run:
        yield run


class TestOneSetOfDaemons:
    def test_three_jobs_back_to_back_with_the_same_daemons(self, daemons: ServiceRun, pki: Pki) -> None:
        """SplitNN, VIMSGD and APFed-C, submitted through JobClient, all finish; no daemon restarts.

        The finished APFed-C model appears on the inference endpoint under its job id, without a restart.
        """
        pids = {name: proc.pid for name, proc in daemons.procs.items()}
        grpc_port, _ = daemons.serving_ports()
        with _jobs(daemons, pki) as jobs:
            for job_id, algorithm in (("b2b-splitnn", "splitnn"), ("b2b-vimsgd", "vimsgd"), ("b2b-apfed", "apfed_c")):
                state, lines = _run_to_end(jobs, job_document(job_id, algorithm))
                assert state == "finished", "\n".join(lines) + daemons.tail()
                assert any(" epoch 1/1 " in line for line in lines), lines
                record = jobs.get(job_id)
                assert record.submitter == "alice" and record.epochs_done == 1 and record.history
                assert record.final_metrics["accuracy"] > 0.1
                if job_id == "b2b-splitnn":  # a federated model is served while its parties are online
                    assert record.served
                    _score_by_id(grpc_port, pki, job_id, daemons.root / "runs" / job_id / "party-1")
            assert jobs.get("b2b-apfed").served
            assert not jobs.get("b2b-splitnn").served  # its parties moved on to the next job
        assert daemons.alive() == dict.fromkeys(pids, True)
        assert {name: proc.pid for name, proc in daemons.procs.items()} == pids
        with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
            assert client.metadata("b2b-apfed").name == "b2b-apfed"
        # A routine switch to the next job is no party going away: its stream ends after Finish.
        assert log_events(daemons.logs["server"], "party_offline") == []
        assert {event["peer"] for event in log_events(daemons.logs["server"], "party_left")} == {2, 3}

    def test_missing_dataset_fails_naming_the_party_and_the_dataset(self, daemons: ServiceRun, pki: Pki) -> None:
        """Party 3 has no dataset "census": the job fails before PSI, saying so; the next job runs."""
        document = job_document("no-census", "splitnn")
        document["job"]["datasets"] = {"3": "census"}
        with _jobs(daemons, pki) as jobs:
            state, lines = _run_to_end(jobs, document)
            failed = jobs.get("no-census")
            assert state == "failed", lines
            assert "party 3" in failed.error and "'census'" in failed.error, failed.error
            assert not any("training" in line for line in lines), lines  # it never reached PSI's end
            state, lines = _run_to_end(jobs, job_document("after-census", "splitnn", **NEXT))
            assert state == "finished", "\n".join(lines) + daemons.tail()

    def test_cancel_in_training_ends_within_a_step_and_the_next_job_runs(self, daemons: ServiceRun, pki: Pki) -> None:
        """Cancelled after its first epoch, a 200-epoch job ends `cancelled` at once; the next job finishes."""
        with _jobs(daemons, pki) as jobs:
            job = jobs.submit(job_document("long", "splitnn", epochs=200))
            epochs_at_cancel = None
            for event in jobs.watch(job.id):
                if event.kind == "epoch" and epochs_at_cancel is None:
                    epochs_at_cancel = jobs.cancel(job.id).epochs_done
            ended = jobs.get(job.id)
            assert ended.state == "cancelled" and "cancelled by alice" in ended.error, ended
            assert epochs_at_cancel is not None
            # The step in flight may finish its epoch's bookkeeping; no further epoch starts.
            assert ended.epochs_done <= epochs_at_cancel + 1, (epochs_at_cancel, ended.epochs_done)
            state, lines = _run_to_end(jobs, job_document("after-cancel", "splitnn"))
            assert state == "finished", "\n".join(lines) + daemons.tail()
        assert all(daemons.alive().values())
        for party in (1, 2, 3):  # every party kept the cancelled job's newest checkpoint
            assert (daemons.root / "runs" / "long" / f"party-{party}" / "latest.pt").exists()

    def test_vfl_jobs_watch_prints_one_json_object_per_event(
        self, daemons: ServiceRun, pki: Pki, tmp_path: Path
    ) -> None:
        """`vfl-jobs submit` then `vfl-jobs watch` on a pipe: JSON lines, the last with the final metrics."""
        files = pki.operator_files("alice")
        options = ["--server", daemons.address, "--ca", str(files.ca), "--cert", str(files.cert)]
        options += ["--key", str(files.key)]
        job_file = tmp_path / "job.toml"
        job_file.write_text(toml_text(job_document("cli-watch", "splitnn")))
        submitted = subprocess.run(
            [str(BIN / "vfl-jobs"), *options, "submit", str(job_file)], capture_output=True, text=True, timeout=60
        )
        assert submitted.returncode == 0, submitted.stderr
        assert "cli-watch" in submitted.stdout
        watched = subprocess.run(
            [str(BIN / "vfl-jobs"), *options, "watch", "cli-watch"], capture_output=True, text=True, timeout=300
        )
        assert watched.returncode == 0, watched.stderr
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert {"state", "epoch"} <= {e["kind"] for e in events}
        assert events[-1]["state"] == "finished" and events[-1]["final_metrics"]["accuracy"] > 0.1


def _score_by_id(grpc_port: int, pki: Pki, model: str, run_dir: Path) -> None:
    """Ask the endpoint for a federated prediction of two aligned sample IDs (every party computes its part)."""
    ids = (run_dir / "aligned_ids.csv").read_text().splitlines()[1:3]
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
        out = client.infer(model, {IDS: np.array([i.encode() for i in ids], dtype=object)})
    assert len(out["label"]) == 2


def _free_port() -> int:
    """A port nobody listens on now (for a client that must be told the address before the server exists)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _unreachable_lines(run: ServiceRun, name: str) -> list[str]:
    """The ``server_unreachable`` lines a daemon has logged so far."""
    return [line for line in run.logs[name].read_text().splitlines() if '"server_unreachable"' in line]


def _retries(run: ServiceRun, name: str) -> int:
    return len(_unreachable_lines(run, name))


class TestReconnect:
    def test_a_client_started_before_the_server_joins_once_it_appears(
        self, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """Both daemons start first, retry with backoff (logged), and take the first job once the server is up."""
        run = ServiceRun(tmp_path, pki, digits_data, serving=False)
        try:
            port = _free_port()
            run.start_clients(server=f"127.0.0.1:{port}")
            # Until each has failed twice: the daemons warm up before they dial out, so a fixed sleep
            # could end before their first attempt (then nothing to retry, and nothing logged).
            for name in ("party-2", "party-3"):
                wait_until(lambda name=name: _retries(run, name) >= 2, f"{name}'s second failed attempt", run)
            assert all(run.alive().values())
            run.start_server(f"127.0.0.1:{port}")
            with _jobs(run, pki) as jobs:
                state, lines = _run_to_end(jobs, job_document("late-server", "splitnn", **NEXT))
            assert state == "finished", "\n".join(lines) + run.tail()
            retries = [json.loads(line) for line in _unreachable_lines(run, "party-2")]
            assert retries and all(r["retry_in_s"] <= 2.0 for r in retries)  # the configured cap
        finally:
            run.close()

    def test_a_server_restart_keeps_history_and_queue_and_the_clients_come_back(
        self, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """1 finished, 1 training, 2 queued behind it, 1 held for a party that never comes; restart; the queue runs.

        The training job resumes first after the restart (it was interrupted, then queued again);
        cancelling it lets the two queued jobs run on the same, reconnected client daemons. The
        held job waits for party 4 before and after the restart, and holds up none of them.
        """
        run = ServiceRun(tmp_path, pki, digits_data, serving=False)
        try:
            run.start_server()
            run.start_clients()
            with _jobs(run, pki) as jobs:
                state, lines = _run_to_end(jobs, job_document("before-restart", "splitnn", **NEXT))
                assert state == "finished", lines
                jobs.submit(job_document("held", "splitnn", passive_parties=[2, 3, 4], join_timeout_s=600))
                jobs.submit(job_document("long", "splitnn", epochs=50, batch_size=8))
                for job_id in ("queued-1", "queued-2"):
                    jobs.submit(job_document(job_id, "splitnn", **NEXT))
                watch_until(jobs, "long", lambda event: event.state == "training", "the state training")
                assert [j.id for j in jobs.list(states=["queued"])] == ["queued-2", "queued-1", "held"]
            assert run.stop(["server"]) == {"server": 0}
            run.start_server(run.address)
            with _jobs(run, pki) as jobs:
                history = {job.id: job for job in jobs.list()}
                assert history["before-restart"].state == "finished"
                assert history["long"].state in ("queued", "aligning", "training"), history["long"]
                # Cancel once the runner has taken the job up again: cancelled while still queued, it
                # would end without resuming (a race the CI run of 2026-11-25 lost once). One watch,
                # begun before the cancel, reads it all: a watch begun after the job ended stops at
                # its first ended state, the "interrupted" before the restart.
                watch = jobs.watch("long")
                events = []
                for event in watch:
                    events.append(str(event))
                    if "then resume from the newest checkpoint" in events[-1]:
                        break
                jobs.cancel("long")
                events += [str(event) for event in watch]
                assert any("interrupted" in line and "during training" in line for line in events), events
                assert any("resuming after" in line for line in events), events
                assert jobs.get("long").state == "cancelled"
                for job_id in ("queued-1", "queued-2"):
                    assert jobs.wait(job_id).state == "finished", run.tail()
                assert jobs.get("held").state == "queued"
                watch_until(
                    jobs,
                    "held",
                    lambda event: "party 4 is not connected" in str(event),
                    "an event saying party 4 is not connected",
                )
            assert all(run.alive().values())  # the same client daemons, reconnected by themselves
        finally:
            run.stop()
            run.close()
