"""Building the active party's gRPC server: one factory for the daemon and the tests.

``build_server`` binds (port 0 picks a free port) and returns the started-to-be server and its
port. mTLS with required client certificates is the default; plaintext exists only behind
``insecure=True``, which logs a loud warning. gRPC health checking and server reflection are
registered so that standard tools (grpc_health_probe, grpcurl) work against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent import futures

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.runtime.daemon import adopt_torch_threads
from vflcore.security.tls import KEEPALIVE_SERVER_OPTIONS, TlsFiles, server_credentials
from vflserver.federation.board import JobBoard
from vflserver.federation.servicer import FederationService

log = structlog.get_logger(__name__)

INSECURE_WARNING = (
    "INSECURE MODE: plaintext gRPC, no certificates, party ids taken on trust from a header. "
    "Anyone who can reach this port can join as any party and read every tensor. Development only."
)


#: Handler threads. Each passive party holds a Subscribe stream (or a waiting NextJob call) and up
#: to three calls in flight per step (uploads, downloads, heartbeat); Watch streams, health checks
#: and the Control API need a few more. Threads are made only when needed.
DEFAULT_WORKERS = 64
#: Calls one party may have in flight: it needs about four (Subscribe, an upload and a download
#: stream, a heartbeat); the rest is headroom for retries, not enough to take every thread.
DEFAULT_PARTY_RPCS = 16


def build_server(
    board: JobBoard,
    listen: str,
    tls: TlsFiles | None,
    *,
    insecure: bool = False,
    control: pb_grpc.ControlServicer | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    workers: int = DEFAULT_WORKERS,
    max_party_rpcs: int = DEFAULT_PARTY_RPCS,
) -> tuple[grpc.Server, int]:
    """A gRPC server for the federation, serving whichever job ``board`` has open.

    A server that runs one job for good (a test) passes ``JobBoard.single(parties)``. With
    ``control`` the Control API listens on the same port. Returns the server (not started) and
    its bound port. At most ``workers`` calls run at once (``maximum_concurrent_rpcs``: one more
    is refused with RESOURCE_EXHAUSTED rather than queued behind streams that may last the whole
    job), and at most ``max_party_rpcs`` of them are one party's.
    """
    if tls is None and not insecure:
        raise ValueError("TLS files are required; plaintext needs insecure=True (the --insecure flag)")
    # Handlers may run torch (a gradient for a passive party): each worker takes the process's thread count.
    pool = futures.ThreadPoolExecutor(max_workers=workers, initializer=adopt_torch_threads)
    server = grpc.server(
        pool, options=KEEPALIVE_SERVER_OPTIONS, interceptors=list(interceptors), maximum_concurrent_rpcs=workers
    )
    servicer = FederationService(board, insecure=insecure, max_party_rpcs=max_party_rpcs)
    pb_grpc.add_FederationServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    services = [pb.DESCRIPTOR.services_by_name["Federation"].full_name]
    if control is not None:
        pb_grpc.add_ControlServicer_to_server(control, server)  # type: ignore[no-untyped-call]
        services.append(pb.DESCRIPTOR.services_by_name["Control"].full_name)

    health_servicer = health.HealthServicer()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    for name in services:
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*services, health.SERVICE_NAME, reflection.SERVICE_NAME), server)

    try:
        if insecure:
            log.warning("insecure_mode", warning=INSECURE_WARNING)
            port = server.add_insecure_port(listen)
        else:
            assert tls is not None
            port = server.add_secure_port(listen, server_credentials(tls))
    except RuntimeError as exc:  # grpcio raises instead of returning 0 on a busy or foreign address
        raise OSError(f"could not listen on {listen}: the address is in use or not local ({exc})") from exc
    if port == 0:
        raise OSError(f"could not listen on {listen}: the address is in use or not local")
    return server, port
