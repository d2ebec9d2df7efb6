"""Turn the certificate files on disk into mutual-TLS credentials (gRPC, and stdlib ssl for REST).

Both daemons load their files here, so a missing or unreadable file fails the same way on every
party: with the path and the command that creates it, before any socket is opened.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from vflcore.errors import TlsConfigError as TlsConfigError  # re-exported: defined in vflcore.errors


@dataclass(frozen=True)
class TlsFiles:
    """The three files one party needs for mTLS: the project CA, its own certificate and its key."""

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """Return the (ca, cert, key) PEM bytes, or raise TlsConfigError naming the first bad file."""
        ca = _read_pem(self.ca, "CA certificate")
        cert = _read_pem(self.cert, "certificate")
        key = _read_pem(self.key, "private key")
        return ca, cert, key


def server_credentials(files: TlsFiles, *, require_client_auth: bool = True) -> grpc.ServerCredentials:
    """Server credentials that demand a client certificate signed by the project CA.

    ``require_client_auth`` is what makes the peer's certificate (and so its party id) verified.
    Only the inference endpoint may turn it off (``client_auth = "optional"``); gRPC then does not
    ask callers for a certificate at all.
    """
    ca, cert, key = files.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=require_client_auth)


def server_ssl_context(files: TlsFiles, *, require_client_cert: bool = True) -> ssl.SSLContext:
    """A TLS server context for stdlib servers (the REST endpoint), trusting only the project CA.

    With ``require_client_cert`` a caller must present a certificate the CA signed; without it a
    caller may present none, but a certificate it does present must still verify.
    """
    ca, _cert, _key = files.read()  # the same checks and messages as the gRPC credentials
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=files.cert, keyfile=files.key)
        context.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"cannot use {files.cert} with {files.key} (and CA {files.ca}): {exc.reason or exc}; "
            "check that the key belongs to the certificate"
        ) from exc
    context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Channel credentials that trust only the project CA and present this party's certificate."""
    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


# Cloud load balancers and NAT gateways drop a TCP flow after a few idle minutes (Azure's load
# balancer after 4 min by default, AWS NLB and NAT gateway after 350 s), and a passive party may
# sit idle that long while the server waits for the other parties. A ping every 30 s keeps the
# flow alive and notices a dead link within 40 s.
KEEPALIVE_CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    # Ping even with no RPC in flight: idle between jobs is exactly when the flow would be dropped.
    ("grpc.keepalive_permit_without_calls", 1),
    # 0 = no cap on pings sent without data; the default cap (2) would stop the pings while idle.
    ("grpc.http2.max_pings_without_data", 0),
]

# By default a gRPC server answers pings more often than every 5 min with GOAWAY "too_many_pings",
# and, unless keepalive_permit_without_calls is set, treats pings on a connection with no RPC as
# abuse for 2 h. Both would cut the clients' 30 s pings (verified against grpcio 1.81). The server
# also pings its clients so that it notices a vanished passive party instead of waiting on it.
KEEPALIVE_SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.max_pings_without_data", 0),
]


def _read_pem(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise TlsConfigError(
            f"{what} {path} not found; create the files with `vfl-certs init` (or pass the right path)"
        ) from exc
    except OSError as exc:
        raise TlsConfigError(f"cannot read {what} {path}: {exc.strerror}; check its permissions") from exc
    if b"-----BEGIN " not in data:
        raise TlsConfigError(f"{what} {path} is not PEM (no -----BEGIN line); reissue it with `vfl-certs`")
    return data
