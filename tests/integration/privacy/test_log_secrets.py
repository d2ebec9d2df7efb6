"""No tensor value, sample ID or feature value in any log line, at any level, whatever happens to a job.

``TestDaemonLogs`` runs the service as a user does (``vfl-server`` and two ``vfl-client``
daemons over mTLS, logging JSON at DEBUG) through a pause (party 3 killed and started again),
a cancel and a server stop, each in the middle of training, then reads every line the three
daemons wrote and looks for each party's IDs and feature values (``vfltesting.leaks``) and for
anything printed like an array (the embeddings and gradients that crossed the wire).

``TestCancelledUpload`` pins the case that used to leak: an upload the caller cancels is an
info line and CANCELLED, not ``handler_failed`` with a traceback.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import structlog

from vflclient import JobClient
from vflcore.data.tables import read_party_csv
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.runtime.config import ServerSettings
from vflcore.security.tls import channel_credentials
from vflserver.federation.board import JobBoard
from vflserver.federation.server import build_server
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
from vfltesting.datasets import write_vertical_split
from vfltesting.eventually import eventually
from vfltesting.jobs import SMALL_JOB
from vfltesting.leaks import Leak, find_leaks, party_secrets
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, job_document, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROWS = 200
#: Short limits, so that a killed party is noticed in seconds.
SERVER = {"party_timeout_s": 60, "heartbeat_timeout_s": 3}
CLIENT = {"heartbeat_s": 0.3}
#: Enough epochs that every job is still training when the test interrupts it.
JOB = {"epochs": 300, "batch_size": 16}


@pytest.fixture(scope="module")
def telltale_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three parties' CSVs whose IDs (e-mail-like, some non-ASCII: ``example_id``) and features
    (100 to 1000, 7 significant digits) no log line can hold by chance."""
    out = tmp_path_factory.mktemp("telltale")
    rng = np.random.default_rng(7)
    features = rng.uniform(100, 1000, size=(ROWS, 9))
    labels = (features[:, 3] + features[:, 6] > 1100).astype(np.int64)
    write_vertical_split(
        out,
        features=features,
        labels=labels,
        feature_names=[f"f{i}" for i in range(9)],
        party_columns=[[0, 1, 2], [3, 4, 5], [6, 7, 8]],
        seed=1,
    )
    # party 2 repeats one row's ID: the warning that a row was dropped is a line that could name it
    party2 = out / "party2.csv"
    text = party2.read_text(encoding="utf-8")
    party2.write_text(text + text.splitlines()[1] + "\n", encoding="utf-8")
    return out


def _events(path: Path) -> list[dict[str, object]]:
    """The JSON events of one daemon's log (the CLIs' plain ``vfl-server: ...`` lines left out)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


class TestDaemonLogs:
    def test_pause_cancel_and_stop_log_no_id_feature_or_tensor(
        self, pki: Pki, telltale_data: Path, tmp_path: Path
    ) -> None:
        """Every line of every daemon's DEBUG log, through a pause, a cancel and a stop, holds no private value."""
        run = ServiceRun(
            tmp_path,
            pki,
            telltale_data,
            serving=False,
            log_level="debug",
            server_settings=dict(SERVER),
            client_settings=dict(CLIENT),
        )
        try:
            run.start_server()
            run.start_clients()
            with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
                jobs.submit(job_document("paused-then-cancelled", "splitnn", **JOB))
                wait_until(lambda: jobs.get("paused-then-cancelled").epochs_done >= 2, "two epochs", run, every_s=0.05)
                run.kill("party-3")  # a pause: the job waits for party 3, then resumes
                wait_until(lambda: jobs.get("paused-then-cancelled").state == "waiting", "the pause", run, every_s=0.05)
                run.start_client(3)
                resumed_at = jobs.get("paused-then-cancelled").epochs_done
                wait_until(
                    lambda: jobs.get("paused-then-cancelled").epochs_done > resumed_at,
                    "an epoch after",
                    run,
                    every_s=0.05,
                )
                jobs.cancel("paused-then-cancelled")
                wait_until(
                    lambda: jobs.get("paused-then-cancelled").state == "cancelled", "the cancel", run, every_s=0.05
                )
                jobs.submit(job_document("stopped", "splitnn", **JOB))
                wait_until(
                    lambda: jobs.get("stopped").epochs_done >= 1, "an epoch of the second job", run, every_s=0.05
                )
            assert run.stop(["server"]) == {"server": 0}
            run.stop()
        finally:
            run.close()

        server = {e["event"] for e in _events(run.logs["server"])}
        assert {"job_waiting", "resumed", "job_cancel_requested", "service_stopped"} <= server, server
        assert "duplicate_ids_dropped" in {e["event"] for e in _events(run.logs["party-2"])}
        secrets = [
            party_secrets(party, read_party_csv(telltale_data / f"party{party}.csv", label_column=label))
            for party, label in ((1, "label"), (2, None), (3, None))
        ]
        leaks: list[Leak] = []
        lines = 0
        for name, path in run.logs.items():
            text = path.read_text().splitlines()
            lines += len(text)
            leaks += find_leaks(text, secrets, name)
        assert lines > 50, run.tail()
        assert not leaks, "\n".join(map(str, leaks[:20]))
        failures = [(name, e) for name, path in run.logs.items() for e in _events(path) if e["level"] == "error"]
        assert not failures, failures


class _SeenByTheServer(grpc.ServerInterceptor):
    """Tells when the server's SendEmbeddings handler has started, and the status it ended the call with."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.codes: list[grpc.StatusCode] = []

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if not details.method.endswith("/SendEmbeddings"):
            return handler

        def upload(chunks: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
            self.entered.set()
            try:
                return handler.stream_unary(chunks, context)
            finally:
                self.codes.append(context.code())

        return grpc.stream_unary_rpc_method_handler(
            upload, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )


class TestCancelledUpload:
    #: Calls cancelled one after another: gRPC ends a cancelled stream a moment before it marks
    #: the call cancelled, and about one call in seven used to land in that moment.
    CALLS = 20

    def test_a_cancelled_upload_is_an_info_line_and_cancelled(
        self, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """Party 2 opens SendEmbeddings and cancels it: one info line, rpc_cancelled, and status CANCELLED."""
        active = ActiveParty(
            JobPlan(SMALL_JOB),
            read_party_csv(digits_data / "party1.csv", label_column="label"),
            ServerSettings(run_dir=tmp_path / "runs"),
        )
        seen = _SeenByTheServer()
        server, port = build_server(
            JobBoard.single(active.parties), "127.0.0.1:0", pki.server_files(), interceptors=[seen]
        )
        server.start()
        release = threading.Event()

        def nothing_yet() -> Iterator[pb.TensorChunk]:
            release.wait(30)  # the stream stays open and empty until the test is done with it
            yield from ()

        channel = grpc.secure_channel(f"127.0.0.1:{port}", channel_credentials(pki.party_files(2)))
        try:
            with structlog.testing.capture_logs() as logs:
                for n in range(1, self.CALLS + 1):
                    seen.entered.clear()
                    call = pb_grpc.FederationStub(channel).SendEmbeddings.future(nothing_yet())
                    assert seen.entered.wait(10), "the server never started the handler"
                    call.cancel()
                    assert call.cancelled()
                    eventually(lambda n=n: len(seen.codes) >= n, f"{n} calls to end", 10, every=0.002)
            assert seen.codes == [grpc.StatusCode.CANCELLED] * self.CALLS
            cancelled = {"event": "rpc_cancelled", "log_level": "info", "rpc": "SendEmbeddings", "code": "CANCELLED"}
            assert logs == [cancelled] * self.CALLS
        finally:
            release.set()
            channel.close()
            server.stop(grace=None)
