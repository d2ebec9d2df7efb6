"""Tests for the TLS preflight diagnosis (vflcore.security.preflight) against real gRPC servers on loopback."""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from vflcore.security.certs import (
    CertificateAuthority,
    create_ca,
    issue_party_cert,
    issue_server_cert,
    load_ca,
)
from vflcore.security.preflight import Finding, diagnose
from vflcore.security.tls import TlsFiles, server_credentials

StartServer = Callable[[str], str]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The project's PKI: a CA, a localhost server certificate and parties 2 and 3."""
    out = tmp_path / "project"
    create_ca(out)
    ca = load_ca(out)
    issue_server_cert(out, ca)
    issue_party_cert(out, ca, 2)
    issue_party_cert(out, ca, 3)
    return out


@pytest.fixture
def project_ca(project: Path) -> CertificateAuthority:
    return load_ca(project)


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another project's PKI, to play the wrong CA."""
    out = tmp_path / "foreign"
    create_ca(out, common_name="foreign-ca")
    ca = load_ca(out)
    issue_server_cert(out, ca)
    issue_party_cert(out, ca, 2)
    return out


@pytest.fixture
def start_server(project: Path) -> Iterator[StartServer]:
    """Start gRPC mTLS servers that trust the project CA and use the named server certificate."""
    servers: list[grpc.Server] = []

    def start(cert_stem: str) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        files = TlsFiles(project / "ca.pem", project / f"{cert_stem}.pem", project / f"{cert_stem}.key")
        port = server.add_secure_port("127.0.0.1:0", server_credentials(files))
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(None).wait()


def _files(folder: Path, stem: str, ca_folder: Path | None = None) -> TlsFiles:
    return TlsFiles((ca_folder or folder) / "ca.pem", folder / f"{stem}.pem", folder / f"{stem}.key")


def _by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {finding.check: finding for finding in findings}


def _failed(findings: list[Finding]) -> dict[str, str]:
    return {finding.check: finding.message for finding in findings if not finding.ok}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class TestDiagnoseAllGood:
    def test_every_check_passes(self, project: Path, start_server: StartServer) -> None:
        """Correct files against the right server pass every check, including the server's acceptance."""
        findings = diagnose(start_server("server"), _files(project, "party-2"), 2)
        assert _failed(findings) == {}
        assert set(_by_check(findings)) == {
            "ca-file",
            "cert-file",
            "key-file",
            "key-match",
            "issuer",
            "validity",
            "party",
            "server-reachable",
            "server-issuer",
            "server-validity",
            "server-name",
            "server-accepts-us",
        }

    def test_findings_print_as_one_line_each(self, project: Path, start_server: StartServer) -> None:
        """A finding renders as a status tag, the check name and its sentence."""
        findings = diagnose(start_server("server"), _files(project, "party-2"), 2)
        assert str(_by_check(findings)["party"]).startswith("[ok] party: ")


class TestDiagnoseLocalFiles:
    def test_wrong_ca(self, project: Path, foreign: Path, start_server: StartServer) -> None:
        """A certificate from another CA is called out as wrong CA, and the server rejects it."""
        failed = _failed(diagnose(start_server("server"), _files(foreign, "party-2", ca_folder=project), 2))
        assert "was not issued by the CA in" in failed["issuer"]
        assert "(wrong CA)" in failed["issuer"]
        assert "rejected it" in failed["server-accepts-us"]

    def test_expired_certificate(
        self, project: Path, project_ca: CertificateAuthority, start_server: StartServer
    ) -> None:
        """An expired certificate is reported with its end date, and the server rejects it."""
        now = dt.datetime.now(dt.UTC)
        end = now - dt.timedelta(days=1)
        issue_party_cert(
            project,
            project_ca,
            2,
            name="old",
            not_valid_before=now - dt.timedelta(days=30),
            not_valid_after=end,
        )
        failed = _failed(diagnose(start_server("server"), _files(project, "old"), 2))
        assert f"expired on {end:%Y-%m-%d}" in failed["validity"]
        assert "server-accepts-us" in failed
        assert set(failed) == {"validity", "server-accepts-us"}

    def test_not_yet_valid_certificate(self, project: Path, project_ca: CertificateAuthority) -> None:
        """A certificate from the future points at this machine's clock."""
        now = dt.datetime.now(dt.UTC)
        issue_party_cert(project, project_ca, 2, name="future", not_valid_before=now + dt.timedelta(days=2))
        failed = _failed(diagnose(f"127.0.0.1:{_free_port()}", _files(project, "future"), 2))
        assert "is not valid until" in failed["validity"]
        assert "clock" in failed["validity"]

    def test_wrong_party(self, project: Path, start_server: StartServer) -> None:
        """Running as party 2 with party 3's certificate says so in those words."""
        failed = _failed(diagnose(start_server("server"), _files(project, "party-3"), 2))
        assert failed == {"party": failed["party"]}
        assert "wrong party: certificate says party 3 but you run --party 2" in failed["party"]

    def test_server_certificate_is_no_party_certificate(self, project: Path) -> None:
        """Using the server certificate as a client certificate says how to issue a party certificate."""
        failed = _failed(diagnose(f"127.0.0.1:{_free_port()}", _files(project, "server"), 2))
        assert "not a party certificate" in failed["party"]
        assert "vfl-certs party 2" in failed["party"]

    def test_key_of_another_certificate(self, project: Path) -> None:
        """A key that does not belong to the certificate is reported."""
        files = TlsFiles(project / "ca.pem", project / "party-2.pem", project / "party-3.key")
        failed = _failed(diagnose(f"127.0.0.1:{_free_port()}", files, 2))
        assert "is not the private key of" in failed["key-match"]

    def test_missing_files_are_named(self, project: Path, start_server: StartServer) -> None:
        """Missing files are named, and the server's certificate is still checked."""
        files = TlsFiles(project / "ca.pem", project / "party-9.pem", project / "party-9.key")
        findings = _by_check(diagnose(start_server("server"), files, 9))
        assert not findings["cert-file"].ok
        assert "party-9.pem not found" in findings["cert-file"].message
        assert "party-9.key not found" in findings["key-file"].message
        assert findings["server-issuer"].ok
        assert "server-accepts-us" not in findings

    def test_ca_file_that_is_no_ca(self, project: Path) -> None:
        """Passing a leaf certificate as the CA file is explained."""
        files = TlsFiles(project / "party-2.pem", project / "party-2.pem", project / "party-2.key")
        failed = _failed(diagnose(f"127.0.0.1:{_free_port()}", files, 2))
        assert "not a CA certificate" in failed["ca-file"]


class TestDiagnoseServer:
    def test_san_mismatch(self, project: Path, project_ca: CertificateAuthority, start_server: StartServer) -> None:
        """A server certificate only for other.example, dialled at 127.0.0.1, is a SAN mismatch."""
        issue_server_cert(project, project_ca, dns_names=("other.example",), ips=(), name="other")
        failed = _failed(diagnose(start_server("other"), _files(project, "party-2"), 2))
        assert set(failed) == {"server-name"}
        assert failed["server-name"].startswith(
            "SAN mismatch: server certificate is for other.example but you dial 127.0.0.1"
        )
        assert "vfl-certs server --dns other.example --ip 127.0.0.1 --force" in failed["server-name"]

    def test_dns_name_is_matched(self, project: Path, start_server: StartServer) -> None:
        """Dialling localhost is covered by the DNS SAN of the default server certificate."""
        address = start_server("server").replace("127.0.0.1", "localhost")
        assert _by_check(diagnose(address, _files(project, "party-2"), 2))["server-name"].ok

    def test_server_from_another_ca(self, project: Path, foreign: Path) -> None:
        """A server whose certificate comes from another CA is named as such."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        port = server.add_secure_port("127.0.0.1:0", server_credentials(_files(foreign, "server")))
        server.start()
        try:
            failed = _failed(diagnose(f"127.0.0.1:{port}", _files(project, "party-2"), 2))
        finally:
            server.stop(None).wait()
        assert "the server's certificate is from another CA" in failed["server-issuer"]
        assert "rejected it" in failed["server-accepts-us"]

    def test_expired_server_certificate(
        self, project: Path, project_ca: CertificateAuthority, start_server: StartServer
    ) -> None:
        """An expired server certificate is reported with its end date."""
        now = dt.datetime.now(dt.UTC)
        issue_server_cert(
            project,
            project_ca,
            name="stale",
            not_valid_before=now - dt.timedelta(days=30),
            not_valid_after=now - dt.timedelta(days=2),
        )
        failed = _failed(diagnose(start_server("stale"), _files(project, "party-2"), 2))
        assert "the server's certificate" in failed["server-validity"]
        assert "expired on" in failed["server-validity"]

    def test_unreachable_server(self, project: Path) -> None:
        """A port where nothing listens is reported as connection refused."""
        failed = _failed(diagnose(f"127.0.0.1:{_free_port()}", _files(project, "party-2"), 2))
        assert set(failed) == {"server-reachable"}
        assert "connection refused" in failed["server-reachable"]
        assert "is vfl-server running" in failed["server-reachable"]

    def test_plaintext_server(self, project: Path) -> None:
        """A server without TLS makes the handshake fail, and the finding says so."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            failed = _failed(diagnose(f"127.0.0.1:{port}", _files(project, "party-2"), 2, timeout=2.0))
        finally:
            server.stop(None).wait()
        assert "TLS handshake" in failed["server-reachable"]

    def test_silent_server_times_out(self, project: Path) -> None:
        """A port that accepts TCP but never speaks is reported as a timeout."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            failed = _failed(diagnose(f"127.0.0.1:{port}", _files(project, "party-2"), 2, timeout=0.3))
        assert "no answer within 0.3 s" in failed["server-reachable"]

    def test_address_without_port(self, project: Path) -> None:
        """An address without a port is explained."""
        failed = _failed(diagnose("vfl.example.org", _files(project, "party-2"), 2))
        assert "is not host:port" in failed["server-reachable"]
