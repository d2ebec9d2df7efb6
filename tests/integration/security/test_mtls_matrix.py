"""The mTLS negative matrix: every way of reaching the server without a valid, matching identity.

All attempts go to ONE running server (one active party whose job waits for parties 2 and 3).
Transport-level failures (no TLS, no client certificate, a certificate the project CA did not
issue or that has expired) must end the handshake, which gRPC reports as UNAVAILABLE. Identity
failures after a good handshake (a certificate whose party differs from the claim, or a party
not in the job) must be PERMISSION_DENIED with a message that names the ids. After every bad
attempt, and with the attempts repeated while the job runs, honest parties 2 and 3 must still
train the job to completion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from vflclient import RunResult
from vflcore.data.tables import ids_digest, read_party_csv
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.security.tls import TlsFiles
from vfltesting.in_process import RunningJob, run_party_in_thread, start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki, Strangers, issue_strangers

pytestmark = pytest.mark.integration

RPC_TIMEOUT_S = 5.0


# ---- one server for the whole module ------------------------------------------------------------


@pytest.fixture(scope="module")
def server(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningJob]:
    """One active party whose one-epoch job waits for parties 2 and 3; shared by every test here.

    ``job_factory`` is function-scoped, so this module builds the same thing with the helper it
    uses (``start_job``) and tears it down the same way.
    """
    running = start_job(
        pki, digits_data, tmp_path_factory.mktemp("matrix-active"), replace(SMALL_JOB, epochs=1), join_timeout_s=120
    )
    yield running
    running.active.stop_event.set()
    running.active.parties.abort(RuntimeError("test over"))
    running.server.stop(grace=None)
    running.thread.join(10)


#: Party-2 look-alike certificates the project CA did not (validly) issue.
BadCerts = Strangers


@pytest.fixture(scope="module")
def bad_certs(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Strangers:
    """A self-signed, a foreign-CA and an expired party-2 certificate, each with its key."""
    return issue_strangers(tmp_path_factory.mktemp("bad-certs"), pki)


# ---- raw clients --------------------------------------------------------------------------------


def _secure_channel(address: str, files: TlsFiles | None, pki: Pki) -> grpc.Channel:
    """A TLS channel that trusts the project CA and presents ``files`` (or no certificate at all)."""
    if files is None:
        credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    else:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=files.key.read_bytes(),
            certificate_chain=files.cert.read_bytes(),
        )
    return grpc.secure_channel(address, credentials)


def _join_request(digits_data: Path, party_data: int, claim: int) -> pb.JoinRequest:
    """A Join that is honest about party ``party_data``'s rows but claims to be party ``claim``."""
    table = read_party_csv(digits_data / f"party{party_data}.csv")
    return pb.JoinRequest(
        party=claim,
        num_rows=table.num_rows,
        num_features=table.features.shape[1],
        id_set_digest=ids_digest(table.ids),
        client_version="test",
    )


def _rejected_join(channel: grpc.Channel, request: pb.JoinRequest) -> grpc.RpcError:
    """Send ``request`` once, without waiting for the channel, and return the error it must raise."""
    stub = pb_grpc.FederationStub(channel)
    with channel, pytest.raises(grpc.RpcError) as caught:
        stub.Join(request, timeout=RPC_TIMEOUT_S, wait_for_ready=False)
    error = caught.value
    assert isinstance(error, grpc.Call)
    return error


def _heartbeat_party(server: RunningJob, files: TlsFiles, pki: Pki) -> int:
    """The party id the server sees on a channel presenting ``files``."""
    with _secure_channel(server.address, files, pki) as channel:
        reply = pb_grpc.FederationStub(channel).Heartbeat(pb.HeartbeatRequest(), timeout=RPC_TIMEOUT_S)
    return int(reply.party)


TRANSPORT_CASES = ["plaintext", "no-client-cert", "self-signed", "other-ca", "expired"]


def _transport_attempt(case: str, address: str, pki: Pki, bad: BadCerts) -> grpc.Channel:
    if case == "plaintext":
        return grpc.insecure_channel(address)
    files = {
        "no-client-cert": None,
        "self-signed": bad.self_signed,
        "other-ca": bad.other_ca,
        "expired": bad.expired,
    }[case]
    return _secure_channel(address, files, pki)


def _run_every_bad_attempt(server: RunningJob, pki: Pki, bad: BadCerts, digits_data: Path) -> str:
    """Fire the whole matrix once and return the job state seen at the start; each must be rejected."""
    state = server.active.parties.state
    request = _join_request(digits_data, 2, 2)
    for case in TRANSPORT_CASES:
        error = _rejected_join(_transport_attempt(case, server.address, pki, bad), request)
        assert error.code() == grpc.StatusCode.UNAVAILABLE, (case, error.details())
    impostor = _rejected_join(
        _secure_channel(server.address, pki.party_files(2), pki), _join_request(digits_data, 3, 3)
    )
    assert impostor.code() == grpc.StatusCode.PERMISSION_DENIED, impostor.details()
    outsider = _rejected_join(
        _secure_channel(server.address, pki.party_files(4), pki), _join_request(digits_data, 2, 4)
    )
    assert outsider.code() == grpc.StatusCode.PERMISSION_DENIED, outsider.details()
    return state


# ---- the matrix -----------------------------------------------------------------------------------


class TestTransportRejections:
    @pytest.mark.parametrize("case", TRANSPORT_CASES)
    def test_handshake_is_refused(
        self, case: str, server: RunningJob, pki: Pki, bad_certs: BadCerts, digits_data: Path
    ) -> None:
        """A client without a valid project-CA client certificate never gets past the handshake: UNAVAILABLE."""
        error = _rejected_join(
            _transport_attempt(case, server.address, pki, bad_certs), _join_request(digits_data, 2, 2)
        )
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        # The message comes from the client's gRPC core ("failed to connect ... Socket closed");
        # the server logs the TLS reason. It must at least name the address that refused us.
        assert f"127.0.0.1:{server.port}" in error.details(), error.details()
        # Control: the server is up, and the same address accepts party 2's real certificate.
        assert _heartbeat_party(server, pki.party_files(2), pki) == 2


class TestIdentityRejections:
    def test_certificate_of_one_party_claiming_another(self, server: RunningJob, pki: Pki, digits_data: Path) -> None:
        """Party 2's certificate claiming party 3 in Join is PERMISSION_DENIED, naming both ids."""
        error = _rejected_join(
            _secure_channel(server.address, pki.party_files(2), pki), _join_request(digits_data, 3, 3)
        )
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        details = error.details()
        assert "identifies party 2" in details and "claims party 3" in details, details

    def test_valid_certificate_of_a_party_not_in_the_job(self, server: RunningJob, pki: Pki, digits_data: Path) -> None:
        """A valid project-CA certificate of party 4, which the job does not list, is PERMISSION_DENIED."""
        error = _rejected_join(
            _secure_channel(server.address, pki.party_files(4), pki), _join_request(digits_data, 2, 4)
        )
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        details = error.details()
        assert "party 4 is not a passive party" in details and "[2, 3]" in details, details


class TestServerKeepsServing:
    def test_honest_parties_finish_the_job_amid_attacks(
        self, server: RunningJob, pki: Pki, bad_certs: BadCerts, digits_data: Path, tmp_path: Path
    ) -> None:
        """After the matrix, and with it fired again while the job runs, parties 2 and 3 train to success."""
        _run_every_bad_attempt(server, pki, bad_certs, digits_data)
        waits: list[Callable[[], RunResult | BaseException]] = [
            run_party_in_thread(server, pki, digits_data, tmp_path, party) for party in (2, 3)
        ]
        # Keep attacking for as long as the job runs (joining, training, serving inference).
        states_attacked = [_run_every_bad_attempt(server, pki, bad_certs, digits_data)]
        while server.thread.is_alive() and len(states_attacked) < 200:
            states_attacked.append(_run_every_bad_attempt(server, pki, bad_certs, digits_data))
        results = [wait() for wait in waits]
        assert all(isinstance(r, RunResult) and r.success for r in results), (results, set(states_attacked))
        summary = server.summary()
        assert len(summary.epochs) == 1 and summary.final_metrics["accuracy"] > 0.1
        assert server.active.parties.state == "finished"
        # And the finished server still refuses every bad caller the same way.
        _run_every_bad_attempt(server, pki, bad_certs, digits_data)
