"""The Control API on a real service (port 0, mTLS): who may call it, and what a submission is checked for.

Least privilege: operator certificates, and only they, reach Control; they in turn cannot call
the federation RPCs. The submitter recorded is the certificate's operator name.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.runtime.config import server_config_from
from vflcore.security.tls import TlsFiles, channel_credentials
from vflserver.jobs.app import Service
from vfltesting.pki import Pki, issue_pki
from vfltesting.service import job_document


def _control(service: Service, tls: TlsFiles) -> tuple[grpc.Channel, pb_grpc.ControlStub]:
    channel = grpc.secure_channel(f"127.0.0.1:{service.port}", channel_credentials(tls))
    return channel, pb_grpc.ControlStub(channel)  # type: ignore[no-untyped-call]


def _code(call: object) -> grpc.StatusCode:
    try:
        call()  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


class TestWhoMayCall:
    def test_an_operator_submits_and_is_recorded_as_the_submitter(self, service: Service, pki: Pki) -> None:
        channel, stub = _control(service, pki.operator_files("alice"))
        with channel:
            document = json.dumps(job_document("by-alice", "splitnn", passive_parties=[4], join_timeout_s=600))
            info = stub.Submit(pb.SubmitRequest(job_document=document), timeout=10)
            assert info.job_id == "by-alice" and info.submitter == "alice"
            assert stub.Get(pb.JobRef(job_id="by-alice"), timeout=10).submitter == "alice"
            assert [j.job_id for j in stub.List(pb.ListRequest(), timeout=10).jobs] == ["by-alice"]
            assert stub.Cancel(pb.JobRef(job_id="by-alice"), timeout=10).job_id == "by-alice"

    @pytest.mark.parametrize("holder", ["party", "caller"])
    def test_party_and_caller_certificates_are_refused(self, service: Service, pki: Pki, holder: str) -> None:
        tls = pki.party_files(2) if holder == "party" else pki.caller_files("test-caller")
        channel, stub = _control(service, tls)
        with channel:
            assert _code(lambda: stub.List(pb.ListRequest(), timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
            submit = pb.SubmitRequest(job_document="{}")
            assert _code(lambda: stub.Submit(submit, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        assert service.store.list() == []

    def test_a_certificate_from_another_ca_is_refused_in_the_handshake(
        self, service: Service, pki: Pki, tmp_path: Path
    ) -> None:
        stranger = issue_pki(tmp_path / "other-ca", (2,))
        files = stranger.operator_files("alice")  # an "alice" the project CA never signed
        tls = TlsFiles(ca=pki.ca, cert=files.cert, key=files.key)
        channel, stub = _control(service, tls)
        with channel:
            assert _code(lambda: stub.List(pb.ListRequest(), timeout=10)) == grpc.StatusCode.UNAVAILABLE

    def test_no_certificate_is_refused_in_the_handshake(self, service: Service, pki: Pki) -> None:
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{service.port}", credentials) as channel:
            stub = pb_grpc.ControlStub(channel)  # type: ignore[no-untyped-call]
            assert _code(lambda: stub.List(pb.ListRequest(), timeout=10)) == grpc.StatusCode.UNAVAILABLE

    def test_an_operator_may_not_join_a_job(self, service: Service, pki: Pki) -> None:
        channel = grpc.secure_channel(f"127.0.0.1:{service.port}", channel_credentials(pki.operator_files("alice")))
        with channel:
            stub = pb_grpc.FederationStub(channel)  # type: ignore[no-untyped-call]
            join = pb.JoinRequest(party=2, num_rows=10)
            assert _code(lambda: stub.Join(join, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
            offer = pb.NextJobRequest(wait_s=0)
            assert _code(lambda: stub.NextJob(offer, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED


class TestSubmissionChecks:
    @pytest.mark.parametrize(
        ("change", "status", "words"),
        [
            ({"algorithm": "nope"}, grpc.StatusCode.INVALID_ARGUMENT, "nope"),
            ({"dataset": "census"}, grpc.StatusCode.INVALID_ARGUMENT, "census"),
            ({"epochs": 0}, grpc.StatusCode.INVALID_ARGUMENT, "epochs"),
            ({"checkpoint_every_steps": -1}, grpc.StatusCode.INVALID_ARGUMENT, "checkpoint_every_steps"),
            ({"job_id": "../../etc"}, grpc.StatusCode.INVALID_ARGUMENT, "[job] job_id"),  # a folder outside run_dir
            ({"job_id": "a/b"}, grpc.StatusCode.INVALID_ARGUMENT, "[job] job_id"),
            ({"job_id": ".hidden"}, grpc.StatusCode.INVALID_ARGUMENT, "[job] job_id"),
            ({"job_id": "credit-student"}, grpc.StatusCode.INVALID_ARGUMENT, "names distilled students"),
            ({"wire_codec": "fp8"}, grpc.StatusCode.INVALID_ARGUMENT, "[job] wire_codec"),
        ],
    )
    def test_a_job_that_cannot_run_is_refused_before_it_is_queued(
        self, service: Service, pki: Pki, change: dict[str, object], status: grpc.StatusCode, words: str
    ) -> None:
        document = job_document("bad", "splitnn")
        document["job"].update(change)
        channel, stub = _control(service, pki.operator_files("alice"))
        with channel:
            with pytest.raises(grpc.RpcError) as refused:
                stub.Submit(pb.SubmitRequest(job_document=json.dumps(document)), timeout=10)
            assert refused.value.code() == status and words in (refused.value.details() or "")
        assert service.store.list() == []

    @pytest.mark.parametrize(
        ("text", "words"),
        [
            ('{"job": ' + "[" * 50_000 + "]" * 50_000 + "}", "nests JSON too deeply"),
            ('{"job": {"epochs": ' + "9" * 5000 + "}}", "a number too large to read"),
        ],
    )
    def test_deep_or_huge_json_is_invalid_argument(self, service: Service, pki: Pki, text: str, words: str) -> None:
        """Found by the fuzz campaign: these were INTERNAL (a RecursionError, a ValueError)."""
        channel, stub = _control(service, pki.operator_files("alice"))
        with channel:
            with pytest.raises(grpc.RpcError) as refused:
                stub.Submit(pb.SubmitRequest(job_document=text), timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in (refused.value.details() or ""), refused.value.details()

    def test_an_unknown_job_is_not_found(self, service: Service, pki: Pki) -> None:
        channel, stub = _control(service, pki.operator_files("alice"))
        with channel:
            assert _code(lambda: stub.Get(pb.JobRef(job_id="ghost"), timeout=10)) == grpc.StatusCode.NOT_FOUND


class TestMetrics:
    def test_the_metrics_endpoint_counts_jobs_and_rpcs(self, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
        """With [metrics] enabled, a scrape shows the queued job, the Control RPCs and no party online yet."""
        files = pki.server_files()
        config = server_config_from(
            {
                "server": {"listen": "127.0.0.1:0", "run_dir": str(tmp_path / "runs")},
                "tls": {"ca": str(files.ca), "cert": str(files.cert), "key": str(files.key)},
                "datasets": {"digits": {"path": str(digits_data / "party1.csv")}},
                "metrics": {"enabled": True, "listen": "127.0.0.1:0"},
            }
        )
        service = Service(config)
        service.start()
        try:
            channel, stub = _control(service, pki.operator_files("alice"))
            with channel:
                blocker = job_document("waits", "splitnn", passive_parties=[4], join_timeout_s=600)
                stub.Submit(pb.SubmitRequest(job_document=json.dumps(blocker)), timeout=10)
                stub.Submit(pb.SubmitRequest(job_document=json.dumps(job_document("behind", "splitnn"))), timeout=10)
                assert _code(lambda: stub.Get(pb.JobRef(job_id="ghost"), timeout=10)) == grpc.StatusCode.NOT_FOUND
            deadline = time.monotonic() + 30
            while len(service.store.events("behind")) < 2 and time.monotonic() < deadline:  # both held
                service.store.wait_for_events("behind", len(service.store.events("behind")), timeout_s=0.5)
            assert service.metrics_port is not None
            with urllib.request.urlopen(f"http://127.0.0.1:{service.metrics_port}/metrics", timeout=10) as reply:
                scrape = reply.read().decode()
            assert 'vfl_jobs{state="queued"} 2.0' in scrape  # both wait for parties that never connected
            assert 'vfl_rpc_total{code="OK",method="Submit",service="vfl.v1.Control"} 2.0' in scrape
            assert 'vfl_rpc_total{code="NOT_FOUND",method="Get",service="vfl.v1.Control"} 1.0' in scrape
        finally:
            service.stop(grace_s=0)
