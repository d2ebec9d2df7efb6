"""Serve one model on the inference endpoints until told to stop (``vfl-server --serve`` and ``vfl-serve``)."""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from vflcore.security.tls import TlsFiles
from vflserver.inference.config import ServingConfig
from vflserver.inference.endpoint import BoundPorts, InferenceEndpoint
from vflserver.inference.registry import ModelRegistry
from vflserver.inference.servable import Servable

log = structlog.get_logger(__name__)


def serve_until(
    servable: Servable,
    config: ServingConfig,
    tls: TlsFiles | None,
    stop: threading.Event,
    *,
    insecure: bool = False,
    port_file: Path | None = None,
) -> None:
    """Start both endpoints for ``servable``, announce them, and block until ``stop`` is set.

    ``port_file`` receives "grpc_port rest_port" once both listen, for scripts that asked for
    port 0. OSError if an address cannot be bound.
    """
    endpoint = InferenceEndpoint(ModelRegistry(servable), config, tls, insecure=insecure)
    ports = endpoint.start()
    try:
        _announce(servable, config, ports, port_file)
        stop.wait()
    finally:
        endpoint.stop()
        log.info("inference_endpoint_stopped", model=servable.name)


def write_ports(port_file: Path, ports: BoundPorts) -> None:
    """Write "grpc_port rest_port" atomically, for scripts that asked for port 0."""
    port_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(f"{ports.grpc} {ports.rest}\n")
    tmp.replace(port_file)


def _announce(servable: Servable, config: ServingConfig, ports: BoundPorts, port_file: Path | None) -> None:
    grpc_host = config.grpc_listen.rpartition(":")[0]
    rest_host = config.rest_listen.rpartition(":")[0]
    if port_file is not None:
        write_ports(port_file, ports)
    print(
        f"serving model {servable.name!r} ({servable.platform}) on the Open Inference Protocol: "
        f"gRPC {grpc_host}:{ports.grpc}, REST https://{rest_host}:{ports.rest}/v2/models/{servable.name}; "
        f"client certificates {config.client_auth}; SIGINT or SIGTERM stops it",
        flush=True,
    )
