"""Start and stop the inference endpoints: KServe v2 over gRPC and over REST, both on TLS.

``InferenceEndpoint`` owns its own gRPC server (separate from the federation's, so inference
traffic never queues behind training RPCs and can listen on another interface) and a REST server
in a thread. Both serve the same ``ModelRegistry``, so a model added when training finishes is
visible on both at once. Certificates are the server's ``TlsFiles``; whether callers must show a
client certificate is ``ServingConfig.client_auth``. Plaintext needs ``insecure=True`` and logs
a loud warning. gRPC health checking and server reflection are registered, as on the federation
server, so grpc_health_probe and grpcurl work.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

import structlog

from vflcore.security.tls import TlsFiles, server_credentials, server_ssl_context
from vflserver.inference.config import ServingConfig, serving_config_from, split_listen
from vflserver.inference.grpc_endpoint import GrpcInferenceServer
from vflserver.inference.handler import InferenceHandler
from vflserver.inference.registry import ModelRegistry
from vflserver.inference.rest import RestServer

__all__ = ["BoundPorts", "InferenceEndpoint", "ServingConfig", "serving_config_from"]

log = structlog.get_logger(__name__)

INSECURE_WARNING = (
    "INSECURE MODE: the inference endpoints speak plaintext gRPC and HTTP, with no certificates. "
    "Anyone who can reach these ports can query every model and read its answers. Development only."
)

# Large batches travel in one message; gRPC's 4 MiB default would refuse 45,000 rows of 24 floats.
MAX_MESSAGE_BYTES = 64 << 20


@dataclass(frozen=True)
class BoundPorts:
    """The ports the endpoints actually listen on (useful when the config asked for port 0)."""

    grpc: int
    rest: int


class InferenceEndpoint:
    """Both inference endpoints over one model registry; ``start()`` binds, ``stop()`` ends them."""

    def __init__(
        self,
        registry: ModelRegistry,
        config: ServingConfig | None = None,
        tls: TlsFiles | None = None,
        *,
        insecure: bool = False,
        server_version: str | None = None,
    ) -> None:
        if tls is None and not insecure:
            raise ValueError("TLS files are required; plaintext needs insecure=True (the --insecure flag)")
        self.registry = registry
        self.config = config or ServingConfig()
        self.handler = InferenceHandler(registry, server_version)
        self._tls, self._insecure = tls, insecure
        self._grpc: GrpcInferenceServer | None = None
        self._rest: RestServer | None = None
        self._ports: BoundPorts | None = None

    @property
    def ports(self) -> BoundPorts:
        if self._ports is None:
            raise RuntimeError("the inference endpoint is not started")
        return self._ports

    def start(self) -> BoundPorts:
        """Bind both endpoints and start serving; OSError if an address cannot be bound."""
        if self._insecure:
            log.warning("insecure_mode", warning=INSECURE_WARNING)
        grpc_server, grpc_port = self._start_grpc()
        try:
            rest = self._build_rest()
        except BaseException:
            grpc_server.stop(None)
            raise
        try:
            rest.start()
        except BaseException:
            rest.stop()
            grpc_server.stop(None)
            raise
        self._grpc, self._rest = grpc_server, rest
        self._ports = BoundPorts(grpc=grpc_port, rest=rest.port)
        log.info(
            "inference_endpoint_listening",
            grpc=f"{split_listen(self.config.grpc_listen)[0]}:{grpc_port}",
            rest=f"{split_listen(self.config.rest_listen)[0]}:{rest.port}",
            client_auth=self.config.client_auth if not self._insecure else "none (insecure)",
        )
        return self._ports

    def stop(self, grace_s: float | None = 1.0) -> None:
        """Stop both endpoints; in-flight gRPC calls get ``grace_s`` to finish. Safe to call twice."""
        if self._rest is not None:
            self._rest.stop()
            self._rest = None
        if self._grpc is not None:
            self._grpc.stop(grace_s)
            self._grpc = None

    def __enter__(self) -> InferenceEndpoint:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- building ---------------------------------------------------------------------------

    def _start_grpc(self) -> tuple[GrpcInferenceServer, int]:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        credentials = None
        if not self._insecure:
            assert self._tls is not None
            credentials = server_credentials(self._tls, require_client_auth=self.config.require_client_cert)
        server = GrpcInferenceServer(self.handler, options, allow_parties=self.config.allow_party_certificates)
        return server, server.start(self.config.grpc_listen, credentials)

    def _build_rest(self) -> RestServer:
        context = None
        if not self._insecure:
            assert self._tls is not None
            context = server_ssl_context(self._tls, require_client_cert=self.config.require_client_cert)
        try:
            return RestServer(
                split_listen(self.config.rest_listen),
                self.handler,
                context,
                self.config.rest_limits,
                allow_parties=self.config.allow_party_certificates,
            )
        except OSError as exc:
            raise OSError(
                f"could not listen on {self.config.rest_listen} (REST inference): {exc.strerror or exc}"
            ) from exc
