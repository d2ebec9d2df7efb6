"""Tests for party and operator identity in certificates and in gRPC's auth context (vflcore.security.identity)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vflcore.job.spec import ACTIVE_PARTY
from vflcore.security.certs import (
    CertificateAuthority,
    issue_caller_cert,
    issue_operator_cert,
    issue_party_cert,
    issue_self_signed_party_cert,
    issue_server_cert,
    load_certificate,
)
from vflcore.security.identity import (
    caller_from_certificate,
    is_operator_name,
    operator_from_auth_context,
    operator_from_certificate,
    operator_uri,
    party_common_name,
    party_from_auth_context,
    party_from_certificate,
    party_uri,
)
from vflcore.security.tls import TlsFiles, channel_credentials, server_credentials

_METHOD = "/vfltest.Identity/WhoAmI"


def _hand_made_cert(common_names: list[str], uris: list[str]) -> x509.Certificate:
    """A self-signed certificate with exactly the given CNs and URI SANs, for the disagreement cases."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn) for cn in common_names])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if uris:
        sans = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris])
        builder = builder.add_extension(sans, critical=False)
    return builder.sign(key, hashes.SHA256())


class TestPartyNames:
    def test_common_name_and_uri(self) -> None:
        """Party 2 is CN party-2 and URI vfl://party/2."""
        assert party_common_name(2) == "party-2"
        assert party_uri(2) == "vfl://party/2"

    def test_active_party_is_one(self) -> None:
        """The active party, the server, is party 1."""
        assert ACTIVE_PARTY == 1


class TestPartyFromCertificate:
    def test_issued_party_certificate(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A certificate from issue_party_cert names its party."""
        assert party_from_certificate(load_certificate(issue_party_cert(tmp_path, ca, 7).cert_path)) == 7

    def test_server_certificate_is_no_party(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The server's TLS certificate does not pass as a party."""
        assert party_from_certificate(load_certificate(issue_server_cert(tmp_path, ca).cert_path)) is None

    @pytest.mark.parametrize(
        ("common_names", "uris"),
        [
            (["party-2"], ["vfl://party/3"]),
            (["party-2"], []),
            (["vfl-ca"], ["vfl://party/2"]),
            (["party-2"], ["vfl://party/2", "vfl://party/3"]),
            (["party-2", "party-3"], ["vfl://party/2"]),
            (["party-02"], ["vfl://party/02"]),
            (["party-2"], ["vfl://party/2/extra"]),
        ],
    )
    def test_disagreeing_or_malformed_names_are_no_party(self, common_names: list[str], uris: list[str]) -> None:
        """CN and URI SAN must both be present, well formed and name the same party."""
        assert party_from_certificate(_hand_made_cert(common_names, uris)) is None

    def test_other_uris_are_ignored(self) -> None:
        """A URI SAN outside vfl://party/ does not spoil the identity."""
        cert = _hand_made_cert(["party-4"], ["https://example.org/", "vfl://party/4"])
        assert party_from_certificate(cert) == 4


class TestOperatorNames:
    def test_uri(self) -> None:
        """Operator alice is URI vfl://operator/alice."""
        assert operator_uri("alice") == "vfl://operator/alice"

    @pytest.mark.parametrize("name", ["alice", "ops.team_1", "A-2", "x" * 64])
    def test_good_names(self, name: str) -> None:
        """ASCII letters, digits, '-', '_' and '.', up to 64, make an operator name."""
        assert is_operator_name(name)

    @pytest.mark.parametrize("name", ["", "party-2", "party-x", "a b", "a/b", ".x", "-x", "é", "x" * 65])
    def test_bad_names(self, name: str) -> None:
        """Empty, party-like, path-like, option-like, non-ASCII and over-long names are refused."""
        assert not is_operator_name(name)


class TestOperatorFromCertificate:
    def test_issued_operator_certificate(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A certificate from issue_operator_cert names its operator and no party."""
        cert = load_certificate(issue_operator_cert(tmp_path, ca, "alice").cert_path)
        assert operator_from_certificate(cert) == "alice"
        assert party_from_certificate(cert) is None

    def test_party_certificate_is_no_operator(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A party's certificate never passes as an operator."""
        assert operator_from_certificate(load_certificate(issue_party_cert(tmp_path, ca, 2).cert_path)) is None

    def test_caller_certificate_is_no_operator(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """An inference caller's certificate (no vfl:// SAN) is neither an operator nor a party."""
        cert = load_certificate(issue_caller_cert(tmp_path, ca, "alice").cert_path)
        assert operator_from_certificate(cert) is None
        assert party_from_certificate(cert) is None

    def test_server_certificate_is_no_operator(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """The server's TLS certificate does not pass as an operator."""
        assert operator_from_certificate(load_certificate(issue_server_cert(tmp_path, ca).cert_path)) is None

    @pytest.mark.parametrize(
        ("common_names", "uris"),
        [
            (["alice"], ["vfl://operator/bob"]),
            (["alice"], []),
            (["vfl-ca"], ["vfl://operator/alice"]),
            (["alice"], ["vfl://operator/alice", "vfl://operator/bob"]),
            (["alice"], ["vfl://operator/alice", "vfl://operator/alice"]),
            (["alice", "bob"], ["vfl://operator/alice"]),
            (["alice"], ["vfl://operator/alice/extra"]),
            (["alice"], ["VFL://operator/alice"]),
            (["party-2"], ["vfl://operator/party-2"]),
            (["a b"], ["vfl://operator/a b"]),
        ],
    )
    def test_disagreeing_or_malformed_names_are_no_operator(self, common_names: list[str], uris: list[str]) -> None:
        """CN and URI SAN must both be present, well formed and name the same operator."""
        assert operator_from_certificate(_hand_made_cert(common_names, uris)) is None

    def test_other_uris_are_ignored(self) -> None:
        """A URI SAN outside vfl:// does not spoil the identity."""
        cert = _hand_made_cert(["alice"], ["https://example.org/", "vfl://operator/alice"])
        assert operator_from_certificate(cert) == "alice"

    @pytest.mark.parametrize(
        ("common_names", "uris"),
        [
            (["alice"], ["vfl://operator/alice", "vfl://party/2"]),
            (["party-2"], ["vfl://party/2", "vfl://operator/alice"]),
        ],
    )
    def test_a_certificate_naming_both_roles_is_neither(self, common_names: list[str], uris: list[str]) -> None:
        """A certificate with both a party and an operator URI SAN is neither a party nor an operator."""
        cert = _hand_made_cert(common_names, uris)
        assert operator_from_certificate(cert) is None
        assert party_from_certificate(cert) is None


class TestCallerFromCertificate:
    def test_issued_caller_certificate(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A certificate from issue_caller_cert names its caller, and is neither a party nor an operator."""
        cert = load_certificate(issue_caller_cert(tmp_path, ca, "scoring-app").cert_path)
        assert caller_from_certificate(cert) == "scoring-app"
        assert party_from_certificate(cert) is None and operator_from_certificate(cert) is None

    def test_no_other_certificate_is_a_caller(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """Party, operator, server and CA certificates of the project are no callers."""
        issued = [
            issue_party_cert(tmp_path, ca, 2),
            issue_operator_cert(tmp_path, ca, "alice"),
            issue_server_cert(tmp_path, ca),
        ]
        certs = [load_certificate(pair.cert_path) for pair in issued] + [ca.cert]
        assert [caller_from_certificate(cert) for cert in certs] == [None] * 4

    @pytest.mark.parametrize(
        ("common_names", "uris"),
        [(["scoring-app"], []), (["scoring-app"], ["vfl://caller/scoring-app"]), (["a", "b"], [])],
    )
    def test_a_certificate_without_client_usage_or_with_a_vfl_uri_is_no_caller(
        self, common_names: list[str], uris: list[str]
    ) -> None:
        """A caller is a client certificate (clientAuth) with one CN and no vfl:// URI; hand-made ones are not."""
        assert caller_from_certificate(_hand_made_cert(common_names, uris)) is None


class TestPartyFromAuthContextData:
    def test_requires_tls(self) -> None:
        """A plaintext peer has no identity even if it carries a certificate field."""
        assert party_from_auth_context({"transport_security_type": [b"insecure"]}) is None
        assert party_from_auth_context({}) is None

    def test_requires_the_peer_certificate(self) -> None:
        """TLS without a client certificate yields no party, whatever the other fields say."""
        context = {
            "transport_security_type": [b"ssl"],
            "x509_common_name": [b"party-2"],
            "x509_subject_alternative_name": [b"vfl://party/2"],
        }
        assert party_from_auth_context(context) is None

    def test_garbage_certificate_is_no_party(self) -> None:
        """An unparsable x509_pem_cert yields None rather than an exception."""
        context = {"transport_security_type": [b"ssl"], "x509_pem_cert": [b"not a certificate"]}
        assert party_from_auth_context(context) is None


class TestOperatorFromAuthContextData:
    def test_requires_tls(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """A plaintext peer is no operator, even with an operator's certificate in the context."""
        pem = issue_operator_cert(tmp_path, ca, "alice").cert_path.read_bytes()
        assert operator_from_auth_context({"transport_security_type": [b"insecure"], "x509_pem_cert": [pem]}) is None
        assert operator_from_auth_context({}) is None

    def test_requires_exactly_one_certificate(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """TLS without a certificate, or with two, yields no operator whatever the other fields say."""
        pem = issue_operator_cert(tmp_path, ca, "alice").cert_path.read_bytes()
        names = {"x509_common_name": [b"alice"], "x509_subject_alternative_name": [b"vfl://operator/alice"]}
        assert operator_from_auth_context({"transport_security_type": [b"ssl"], **names}) is None
        two = {"transport_security_type": [b"ssl"], "x509_pem_cert": [pem, pem]}
        assert operator_from_auth_context(two) is None

    def test_reads_the_operator_from_the_certificate(self, tmp_path: Path, ca: CertificateAuthority) -> None:
        """One TLS peer certificate of an operator yields its name, and no party."""
        pem = issue_operator_cert(tmp_path, ca, "alice").cert_path.read_bytes()
        context = {"transport_security_type": [b"ssl"], "x509_pem_cert": [pem]}
        assert operator_from_auth_context(context) == "alice"
        assert party_from_auth_context(context) is None

    def test_garbage_certificate_is_no_operator(self) -> None:
        """An unparsable x509_pem_cert yields None rather than an exception."""
        context = {"transport_security_type": [b"ssl"], "x509_pem_cert": [b"not a certificate"]}
        assert operator_from_auth_context(context) is None


class _IdentityServer:
    """A real gRPC server over mTLS whose one method answers with the caller's party id."""

    def __init__(self, files: TlsFiles) -> None:
        handler = grpc.unary_unary_rpc_method_handler(self._who_am_i)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("vfltest.Identity", {"WhoAmI": handler}),)
        )
        self.port = self.server.add_secure_port("127.0.0.1:0", server_credentials(files))
        self.auth_contexts: list[dict[str, list[bytes]]] = []
        self.server.start()

    def _who_am_i(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        auth_context = context.auth_context()
        self.auth_contexts.append(auth_context)
        return str(party_from_auth_context(auth_context)).encode()

    def call(self, files: TlsFiles) -> bytes:
        with grpc.secure_channel(f"127.0.0.1:{self.port}", channel_credentials(files)) as channel:
            reply: bytes = channel.unary_unary(_METHOD)(b"", timeout=10)
            return reply


@pytest.fixture
def pki(tmp_path: Path, ca: CertificateAuthority) -> Path:
    issue_server_cert(tmp_path, ca)
    issue_party_cert(tmp_path, ca, 2)
    issue_party_cert(tmp_path, ca, 3)
    issue_self_signed_party_cert(tmp_path, 2, "rogue")
    issue_operator_cert(tmp_path, ca, "alice")
    issue_caller_cert(tmp_path, ca, "scoring-app")
    return tmp_path


@pytest.fixture
def identity_server(pki: Path) -> Iterator[_IdentityServer]:
    server = _IdentityServer(TlsFiles(pki / "ca.pem", pki / "server.pem", pki / "server.key"))
    yield server
    server.server.stop(None).wait()


def _client_files(pki: Path, stem: str) -> TlsFiles:
    return TlsFiles(pki / "ca.pem", pki / f"{stem}.pem", pki / f"{stem}.key")


class TestPartyFromAuthContextOverMtls:
    def test_party_two_is_seen_as_two(self, pki: Path, identity_server: _IdentityServer) -> None:
        """A client with the party-2 certificate is party 2 on the server."""
        assert identity_server.call(_client_files(pki, "party-2")) == b"2"

    def test_each_party_is_told_apart(self, pki: Path, identity_server: _IdentityServer) -> None:
        """Two clients on one server get their own party ids."""
        assert identity_server.call(_client_files(pki, "party-3")) == b"3"
        assert identity_server.call(_client_files(pki, "party-2")) == b"2"

    def test_auth_context_carries_the_verified_certificate(self, pki: Path, identity_server: _IdentityServer) -> None:
        """gRPC reports CN, URI SAN and the PEM of the client certificate, as identity relies on."""
        identity_server.call(_client_files(pki, "party-2"))
        seen = identity_server.auth_contexts[-1]
        assert seen["transport_security_type"] == [b"ssl"]
        assert seen["x509_common_name"] == [b"party-2"]
        assert seen["x509_subject_alternative_name"] == [b"vfl://party/2"]
        assert seen["x509_pem_cert"] == [(pki / "party-2.pem").read_bytes()]

    def test_certificate_from_no_ca_is_refused(self, pki: Path, identity_server: _IdentityServer) -> None:
        """A self-signed party certificate never reaches the handler: the handshake fails."""
        with pytest.raises(grpc.RpcError) as caught:
            identity_server.call(_client_files(pki, "rogue"))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert identity_server.auth_contexts == []

    def test_server_certificate_cannot_act_as_a_client(self, pki: Path, identity_server: _IdentityServer) -> None:
        """The server certificate (serverAuth only) is refused as a client certificate."""
        with pytest.raises(grpc.RpcError) as caught:
            identity_server.call(_client_files(pki, "server"))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


class TestOperatorFromAuthContextOverMtls:
    def test_operator_is_seen_as_operator_and_no_party(self, pki: Path, identity_server: _IdentityServer) -> None:
        """An operator's certificate passes the handshake; the server sees operator alice and no party."""
        assert identity_server.call(_client_files(pki, "alice")) == b"None"
        seen = identity_server.auth_contexts[-1]
        assert seen["x509_subject_alternative_name"] == [b"vfl://operator/alice"]
        assert operator_from_auth_context(seen) == "alice"

    def test_party_is_no_operator(self, pki: Path, identity_server: _IdentityServer) -> None:
        """A party's certificate over mTLS is party 2 and no operator."""
        assert identity_server.call(_client_files(pki, "party-2")) == b"2"
        assert operator_from_auth_context(identity_server.auth_contexts[-1]) is None

    def test_caller_is_neither(self, pki: Path, identity_server: _IdentityServer) -> None:
        """An inference caller's certificate over mTLS is neither a party nor an operator."""
        assert identity_server.call(_client_files(pki, "scoring-app")) == b"None"
        assert operator_from_auth_context(identity_server.auth_contexts[-1]) is None
