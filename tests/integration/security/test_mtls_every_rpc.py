"""The mTLS negative matrix on every RPC: each federation RPC and each Control RPC, each wrong identity.

``test_mtls_matrix`` attacks Join on a server with a job waiting and shows the honest parties
still finish; this module takes every RPC the proto declares (``vfltesting.rpc``, read from the
descriptors, so a new RPC is covered without editing this file) against the whole service
(Federation and Control on one port):

- transport: plaintext, no client certificate, self-signed, another CA, expired: UNAVAILABLE,
  the handshake never completes;
- wrong role: a caller's or an operator's certificate on a federation RPC, a party's or a
  caller's on a Control RPC: PERMISSION_DENIED, with a message that says what is needed.

Each request is an empty message (a client stream of one), so nothing but the identity can
decide the answer. The service must still answer its rightful callers afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from vflcore.proto import federation_pb2 as pb
from vflcore.security.tls import TlsFiles, channel_credentials
from vflserver.jobs.app import Service
from vfltesting.in_process import start_service
from vfltesting.pki import Pki, issue_strangers
from vfltesting.rpc import CONTROL, FEDERATION, Rpc

pytestmark = pytest.mark.integration

TIMEOUT_S = 5.0
TRANSPORT = ("plaintext", "no-client-cert", "self-signed", "other-ca", "expired")


@pytest.fixture(scope="module")
def strangers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> dict[str, TlsFiles | None]:
    """The transport cases' client certificates (None: present none), each trusting the project CA."""
    issued = issue_strangers(tmp_path_factory.mktemp("strangers"), pki)
    return {
        "no-client-cert": None,
        "self-signed": issued.self_signed,
        "other-ca": issued.other_ca,
        "expired": issued.expired,
    }


@pytest.fixture(scope="module")
def running(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = start_service(pki, digits_data, tmp_path_factory.mktemp("runs"))
    try:
        yield service
    finally:
        service.stop(grace_s=0)


def _channel(address: str, case: str, pki: Pki, strangers: dict[str, TlsFiles | None]) -> grpc.Channel:
    if case == "plaintext":
        return grpc.insecure_channel(address)
    files = strangers[case]
    if files is None:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes()))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=files.key.read_bytes(),
        certificate_chain=files.cert.read_bytes(),
    )
    return grpc.secure_channel(address, credentials)


def _refusal(rpc: Rpc, channel: grpc.Channel) -> grpc.RpcError:
    with channel, pytest.raises(grpc.RpcError) as caught:
        rpc.call(channel, [rpc.request()], timeout=TIMEOUT_S)
    return caught.value


@pytest.mark.parametrize("rpc", FEDERATION + CONTROL, ids=str)
@pytest.mark.parametrize("case", TRANSPORT)
def test_no_valid_certificate_never_gets_past_the_handshake(
    rpc: Rpc, case: str, running: Service, pki: Pki, strangers: dict[str, TlsFiles | None]
) -> None:
    error = _refusal(rpc, _channel(f"127.0.0.1:{running.port}", case, pki, strangers))
    assert error.code() == grpc.StatusCode.UNAVAILABLE, (case, error.details())


def _files(pki: Pki, role: str) -> TlsFiles:
    """A certificate of ``role``: party 2, operator "alice" or caller "test-caller"."""
    if role == "party":
        return pki.party_files(2)
    return pki.operator_files("alice") if role == "operator" else pki.caller_files("test-caller")


@pytest.mark.parametrize("rpc", FEDERATION, ids=str)
@pytest.mark.parametrize("role", ["caller", "operator"])
def test_only_a_party_certificate_reaches_a_federation_rpc(rpc: Rpc, role: str, running: Service, pki: Pki) -> None:
    channel = grpc.secure_channel(f"127.0.0.1:{running.port}", channel_credentials(_files(pki, role)))
    error = _refusal(rpc, channel)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert "carries no party identity" in error.details() and "vfl-certs party N" in error.details()


@pytest.mark.parametrize("rpc", CONTROL, ids=str)
@pytest.mark.parametrize("role", ["party", "caller"])
def test_only_an_operator_certificate_reaches_a_control_rpc(rpc: Rpc, role: str, running: Service, pki: Pki) -> None:
    channel = grpc.secure_channel(f"127.0.0.1:{running.port}", channel_credentials(_files(pki, role)))
    error = _refusal(rpc, channel)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert "operator" in error.details(), error.details()


def test_the_rightful_callers_are_still_served(running: Service, pki: Pki) -> None:
    """After the whole matrix: an operator lists jobs, a party's heartbeat names it."""
    address = f"127.0.0.1:{running.port}"
    [listing] = [rpc for rpc in CONTROL if rpc.name == "List"]
    with grpc.secure_channel(address, channel_credentials(pki.operator_files("alice"))) as channel:
        assert listing.call(channel, [pb.ListRequest()], timeout=TIMEOUT_S) == [pb.JobList()]
    [heartbeat] = [rpc for rpc in FEDERATION if rpc.name == "Heartbeat"]
    with grpc.secure_channel(address, channel_credentials(pki.party_files(3))) as channel:
        [reply] = heartbeat.call(channel, [pb.HeartbeatRequest()], timeout=TIMEOUT_S)
    assert reply.party == 3 and reply.state == "idle"
