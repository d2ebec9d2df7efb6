"""Turn the certificate files on disk into gRPC mutual-TLS credentials and keepalive options.

Both daemons load their files here, so a missing or unreadable file fails the same way on every
party: with the path and the command that creates it, before any socket is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


class TlsConfigError(ValueError):
    """A TLS file is missing, unreadable or not PEM; the message names it and says how to fix it."""


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


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Server credentials that demand a client certificate signed by the project CA.

    ``require_client_auth`` is what makes the peer's certificate (and so its party id) verified.
    """
    ca, cert, key = files.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


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
