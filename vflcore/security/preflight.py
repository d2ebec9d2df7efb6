"""Explain, in plain words, why a passive party's mTLS connection to the server would fail.

gRPC reports every TLS problem as "UNAVAILABLE: failed to connect to all addresses". ``diagnose``
instead checks each usual cause on its own and returns one ``Finding`` per check, each with a
sentence that says what is wrong and which command fixes it:

=====================  ==================================================================
check                  what it looks at
=====================  ==================================================================
ca-file, cert-file,    the local files exist and parse (and ca.pem really is a CA)
key-file
key-match              the private key belongs to the certificate
issuer                 the certificate was signed by the CA in ca.pem
validity               the certificate is inside its validity period
party                  the certificate names the party this process runs as
server-reachable       a TCP + TLS connection to the server opens
server-issuer          the server's certificate was signed by our CA
server-validity        the server's certificate is inside its validity period
server-name            the server's SANs cover the host we dial
server-accepts-us      the server keeps the connection open after seeing our certificate
=====================  ==================================================================

The server's certificate is fetched without verification on purpose: in TLS 1.3 the server sends
it before asking for ours, so it can be inspected even when the handshake would otherwise fail.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from vflcore.security.certs import is_ca, is_signed_by
from vflcore.security.identity import party_from_certificate
from vflcore.security.tls import TlsFiles

# What a gRPC client sends first: the HTTP/2 preface and an empty SETTINGS frame. A gRPC server
# answers with its own SETTINGS frame only if it accepted our certificate.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS_TYPE = 4
_RENEW_WARNING = dt.timedelta(days=30)


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: whether it passed, its name, and a sentence a user can act on."""

    ok: bool
    check: str
    message: str

    def __str__(self) -> str:
        return f"[{'ok' if self.ok else 'FAIL'}] {self.check}: {self.message}"


@dataclass(frozen=True)
class _LocalFiles:
    ca: x509.Certificate | None
    cert: x509.Certificate | None
    key: PrivateKeyTypes | None


def diagnose(server_address: str, files: TlsFiles, expected_party: int, *, timeout: float = 5.0) -> list[Finding]:
    """Check this party's TLS files and the server at ``server_address`` (``host:port``)."""
    findings: list[Finding] = []
    local = _load_local_files(files, findings)
    if local.cert is not None and local.key is not None:
        findings.append(_check_key_match(local.cert, local.key, files))
    if local.cert is not None and local.ca is not None:
        findings.append(_check_issuer(local.cert, local.ca, files))
    if local.cert is not None:
        renew = f"issue a new one with `vfl-certs party {expected_party} --force`"
        findings.append(_check_validity("validity", f"your certificate {files.cert}", local.cert, renew))
        findings.append(_check_party(local.cert, expected_party, files.cert))
    findings.extend(_check_server(server_address, files, local, timeout))
    return findings


def _load_local_files(files: TlsFiles, findings: list[Finding]) -> _LocalFiles:
    ca, ca_finding = _load_ca(files.ca)
    cert, cert_finding = _load_cert("cert-file", files.cert)
    key, key_finding = _load_key(files.key)
    findings += [ca_finding, cert_finding, key_finding]
    return _LocalFiles(ca=ca, cert=cert, key=key)


def _load_ca(path: Path) -> tuple[x509.Certificate | None, Finding]:
    ca, finding = _load_cert("ca-file", path)
    if ca is None or is_ca(ca):
        return ca, finding
    return None, Finding(
        False,
        "ca-file",
        f"{path} holds {ca.subject.rfc4514_string()}, which is not a CA certificate; "
        "pass the project's ca.pem as the CA file",
    )


def _load_cert(check: str, path: Path) -> tuple[x509.Certificate | None, Finding]:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except OSError as exc:
        return None, Finding(False, check, _unreadable(path, exc))
    except ValueError:
        return None, Finding(False, check, f"{path} is not a PEM certificate; reissue it with `vfl-certs`")
    return cert, Finding(True, check, f"{path} holds {cert.subject.rfc4514_string()}")


def _load_key(path: Path) -> tuple[PrivateKeyTypes | None, Finding]:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        return None, Finding(False, "key-file", _unreadable(path, exc))
    except (ValueError, TypeError):  # TypeError: the key is encrypted
        message = f"{path} is not an unencrypted PEM private key; reissue it with `vfl-certs`"
        return None, Finding(False, "key-file", message)
    return key, Finding(True, "key-file", f"{path} holds a private key")


def _unreadable(path: Path, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{path} not found; create it with `vfl-certs init` or pass the right path"
    return f"cannot read {path}: {exc.strerror}; check the file's permissions"


def _check_key_match(cert: x509.Certificate, key: PrivateKeyTypes, files: TlsFiles) -> Finding:
    if _public_der(cert.public_key()) == _public_der(key.public_key()):
        return Finding(True, "key-match", f"{files.key} is the private key of {files.cert}")
    return Finding(
        False,
        "key-match",
        f"{files.key} is not the private key of {files.cert}; use the .key file issued together with it",
    )


def _check_issuer(cert: x509.Certificate, ca: x509.Certificate, files: TlsFiles) -> Finding:
    if is_signed_by(cert, ca):
        return Finding(True, "issuer", f"{files.cert} was issued by the CA in {files.ca}")
    return Finding(
        False,
        "issuer",
        f"your certificate was not issued by the CA in {files.ca} (wrong CA): it names issuer "
        f"{cert.issuer.rfc4514_string()}; get a certificate and ca.pem from the same `vfl-certs init`",
    )


def _check_validity(check: str, what: str, cert: x509.Certificate, renew: str) -> Finding:
    now = dt.datetime.now(dt.UTC)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < start:
        return Finding(False, check, f"{what} is not valid until {_when(start)}; check this machine's clock or wait")
    if now > end:
        return Finding(False, check, f"{what} expired on {_when(end)}; {renew}")
    if end - now < _RENEW_WARNING:
        return Finding(True, check, f"{what} is valid but expires on {_when(end)}; renew it soon")
    return Finding(True, check, f"{what} is valid from {_when(start)} until {_when(end)}")


def _check_party(cert: x509.Certificate, expected_party: int, path: Path) -> Finding:
    party = party_from_certificate(cert)
    if party is None:
        return Finding(
            False,
            "party",
            f"{path} is not a party certificate (it needs CN party-N and URI SAN vfl://party/N); "
            f"issue one with `vfl-certs party {expected_party}`",
        )
    if party != expected_party:
        return Finding(
            False,
            "party",
            f"wrong party: certificate says party {party} but you run --party {expected_party}; "
            f"use party-{expected_party}.pem or run with --party {party}",
        )
    return Finding(True, "party", f"{path} identifies party {party}")


def _check_server(server_address: str, files: TlsFiles, local: _LocalFiles, timeout: float) -> list[Finding]:
    try:
        host, port = _split_address(server_address)
    except ValueError as exc:
        return [Finding(False, "server-reachable", str(exc))]
    present_cert = local.cert is not None and local.key is not None
    context = _probe_context(files if present_cert else None)
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
            accepted = _server_accepts_us(tls, server_address) if present_cert else None
    except OSError as exc:  # ssl.SSLError and socket.timeout are OSErrors too
        return [Finding(False, "server-reachable", _connection_problem(exc, host, port, timeout))]
    findings = [Finding(True, "server-reachable", f"{server_address} answers TLS")]
    if der is None:
        return [*findings, Finding(False, "server-name", f"{server_address} sent no certificate")]
    server_cert = x509.load_der_x509_certificate(der)
    if local.ca is not None:
        findings.append(_check_server_issuer(server_cert, local.ca, files.ca))
    findings.append(
        _check_validity(
            "server-validity",
            f"the server's certificate at {server_address}",
            server_cert,
            "reissue it on the server with `vfl-certs server --dns NAME --ip ADDR --force`",
        )
    )
    findings.append(_check_server_name(server_cert, host))
    if accepted is not None:
        findings.append(accepted)
    return findings


def _split_address(server_address: str) -> tuple[str, int]:
    address = server_address.removeprefix("dns:///")
    host, sep, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:50051
    if not sep or not host or not port.isdigit():
        raise ValueError(f"server address {server_address!r} is not host:port (for example vfl.example.org:50051)")
    return host, int(port)


def _probe_context(files: TlsFiles | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # No verification here: the point is to fetch and explain the server's certificate, whatever it is.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])  # gRPC servers close connections that do not offer h2
    if files is not None:
        # A bad file was already reported by the local checks; still fetch the server's certificate.
        with contextlib.suppress(OSError, ValueError):
            context.load_cert_chain(files.cert, files.key)
    return context


def _server_accepts_us(tls: ssl.SSLSocket, server_address: str) -> Finding:
    try:
        tls.sendall(_HTTP2_PREFACE)
        reply = tls.recv(9)
    except TimeoutError:
        return Finding(
            False,
            "server-accepts-us",
            f"{server_address} completed TLS but sent no HTTP/2 settings; is it a vfl-server (gRPC) port?",
        )
    except OSError:
        reply = b""
    if not reply:
        return Finding(
            False,
            "server-accepts-us",
            f"{server_address} closed the connection after seeing your certificate: it rejected it "
            "(the server trusts a different CA, or your certificate expired); ask the server operator "
            "which ca.pem the server uses",
        )
    if len(reply) < 4 or reply[3] != _HTTP2_SETTINGS_TYPE:
        return Finding(False, "server-accepts-us", f"{server_address} answered, but not as a gRPC server")
    return Finding(True, "server-accepts-us", f"{server_address} accepted your certificate")


def _connection_problem(exc: OSError, host: str, port: int, timeout: float) -> str:
    where = f"{host}:{port}"
    if isinstance(exc, ConnectionRefusedError):
        return f"cannot reach {where}: connection refused; is vfl-server running there and is the port right?"
    if isinstance(exc, TimeoutError):
        return (
            f"cannot reach {where}: no answer within {timeout:g} s; the host may be down or a firewall "
            "or security group may drop the traffic"
        )
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host name {host!r}; check the spelling of --server and DNS"
    if isinstance(exc, ssl.SSLError):
        return (
            f"the TLS handshake with {where} failed ({exc.reason or exc}); is that port a TLS "
            "(vfl-server) port rather than a plaintext one, or does the server only speak TLS 1.2?"
        )
    return f"cannot reach {where}: {exc.strerror or exc}"


def _check_server_issuer(server_cert: x509.Certificate, ca: x509.Certificate, ca_path: Path) -> Finding:
    if is_signed_by(server_cert, ca):
        return Finding(True, "server-issuer", f"the server's certificate was issued by the CA in {ca_path}")
    return Finding(
        False,
        "server-issuer",
        f"the server's certificate is from another CA (issuer {server_cert.issuer.rfc4514_string()}), "
        f"not the one in {ca_path}; get the server's ca.pem or reissue the server certificate from your CA",
    )


def _check_server_name(server_cert: x509.Certificate, host: str) -> Finding:
    dns_names, ips = _server_names(server_cert)
    covered = _ip_covered(host, ips) if _is_ip(host) else _dns_covered(host, dns_names)
    listed = ", ".join([*dns_names, *(str(ip) for ip in ips)]) or "no names at all"
    if covered:
        return Finding(True, "server-name", f"the server's certificate covers {host} (SANs: {listed})")
    return Finding(
        False,
        "server-name",
        f"SAN mismatch: server certificate is for {listed} but you dial {host}; "
        f"reissue it on the server with `{_reissue_command(dns_names, ips, host)}`",
    )


def _reissue_command(dns_names: list[str], ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address], host: str) -> str:
    """The vfl-certs command that keeps the server's current names and adds the one being dialled."""
    if _is_ip(host):
        ips = [*ips, ipaddress.ip_address(host)]
    else:
        dns_names = [*dns_names, host]
    flags = [f"--dns {name}" for name in dns_names] + [f"--ip {ip}" for ip in ips]
    return f"vfl-certs server {' '.join(flags)} --force"


def _server_names(
    cert: x509.Certificate,
) -> tuple[list[str], list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    ips = [
        ip
        for ip in san.get_values_for_type(x509.IPAddress)
        if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    ]
    return san.get_values_for_type(x509.DNSName), ips


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _ip_covered(host: str, ips: list[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> bool:
    return ipaddress.ip_address(host) in ips


def _dns_covered(host: str, dns_names: list[str]) -> bool:
    wanted = host.lower().rstrip(".")
    for name in (n.lower().rstrip(".") for n in dns_names):
        if name == wanted:
            return True
        # A wildcard covers exactly one leftmost label, as TLS clients match it.
        if name.startswith("*.") and "." in wanted and wanted.split(".", 1)[1] == name[2:]:
            return True
    return False


def _public_der(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _when(moment: dt.datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"
