"""The ``[serving]`` table of ``vfl-server``'s config: where the inference endpoints listen, and who may call.

    [serving]
    enabled = false                  # serve the trained model after training (`vfl-server --serve`)
    grpc_listen = "127.0.0.1:8001"   # KServe v2 gRPC; port 0 picks a free port
    rest_listen = "127.0.0.1:8000"   # KServe v2 REST over HTTPS
    client_auth = "required"         # or "optional": callers without a certificate are let in
    allow_party_certificates = false # party certificates may call too (they could read every aligned row's prediction)
    degraded = "none"                # federated models with a party offline: fail, or "zeros" / "mean"
    max_connections = 256            # REST: open connections; more are closed at once
    handshake_timeout_s = 5          # REST: a TLS handshake must be done by then
    header_timeout_s = 10            # REST: a whole request head, from connect or the last response
    body_timeout_s = 30              # REST: the body, from the end of the head
    max_body_bytes = 67108864        # REST: larger bodies get 413 before they are read

The defaults are Triton's and KServe's ports, on loopback. Every error is a ConfigError that
names the file and the key, in the style of ``vflcore.runtime.config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vflcore.errors import ConfigError
from vflcore.settings import (
    Check,
    Section,
    at_least_one,
    check_declared,
    one_of,
    positive,
    read_settings,
    refuse_unknown,
    setting,
    table_keys,
)

CLIENT_AUTH = ("required", "optional")
#: What stands in for an offline passive party in federated inference (``serving.federated``):
#: nothing (the request fails with UNAVAILABLE), zeros, or its mean representation over training.
DEGRADED_MODES = ("none", "zeros", "mean")


def _listen(value: Any) -> str | None:
    """``host:port`` (``split_listen``'s form; port 0 picks a free port)."""
    try:
        split_listen(value)
    except (ValueError, AttributeError):
        return "; give host:port, e.g. 127.0.0.1:8001 (port 0 picks a free port)"
    return None


def _serving(check: Check | None = None) -> dict[str, Any]:
    """A key of the server config's ``[serving]`` table (``vflcore.settings``), read by its type, with its rule."""
    return setting("serving", check=check)


@dataclass(frozen=True)
class RestLimits:
    """What callers may hold of the REST endpoint (``vflserver.inference.rest``); the defaults are ``[serving]``'s."""

    max_connections: int = field(default=256, metadata=_serving(at_least_one))
    handshake_timeout_s: float = field(default=5.0, metadata=_serving(positive))
    header_timeout_s: float = field(default=10.0, metadata=_serving(positive))
    body_timeout_s: float = field(default=30.0, metadata=_serving(positive))
    max_body_bytes: int = field(default=64 << 20, metadata=_serving(at_least_one))

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class ServingConfig:
    """Whether to serve, where the two endpoints listen, who may call, and how to answer with a party offline."""

    enabled: bool = field(default=False, metadata=_serving())
    grpc_listen: str = field(default="127.0.0.1:8001", metadata=_serving(_listen))
    rest_listen: str = field(default="127.0.0.1:8000", metadata=_serving(_listen))
    client_auth: str = field(default="required", metadata=_serving(one_of(CLIENT_AUTH)))
    #: Whether a party's certificate may call the endpoint (``serving.access``); off by default.
    allow_party_certificates: bool = field(default=False, metadata=_serving())
    degraded: str = field(default="none", metadata=_serving(one_of(DEGRADED_MODES)))
    rest_limits: RestLimits = RestLimits()

    def __post_init__(self) -> None:
        check_declared(self)
        refuse_one_address(self.grpc_listen, self.rest_listen, type(self).__name__)

    @property
    def require_client_cert(self) -> bool:
        return self.client_auth == "required"


def serving_config_from(doc: Mapping[str, Any], source: Path | None = None) -> ServingConfig:
    """Build a ServingConfig from a parsed TOML document; a missing ``[serving]`` table gives the defaults."""
    sec = Section(doc, "serving", source)
    refuse_unknown(sec, (*table_keys(ServingConfig, "serving"), *table_keys(RestLimits, "serving")))
    values = read_settings(ServingConfig, doc, source)
    refuse_one_address(values["grpc_listen"], values["rest_listen"], sec.where)
    return ServingConfig(**values, rest_limits=RestLimits(**read_settings(RestLimits, doc, source)))


def refuse_one_address(grpc_listen: str, rest_listen: str, where: str) -> None:
    """The rule across the two addresses: they differ, unless both pick a free port (port 0)."""
    if grpc_listen == rest_listen and not grpc_listen.endswith(":0"):
        raise ConfigError(f"{where}: [serving] grpc_listen and rest_listen are both {grpc_listen!r}")


def split_listen(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6 address]:port``) as (host, port); ValueError says what is wrong."""
    host, sep, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{address!r} must look like host:port, e.g. 127.0.0.1:8001 (port 0 picks a free port)")
    return host, int(port_text)
