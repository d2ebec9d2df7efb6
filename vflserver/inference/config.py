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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vflcore.errors import ConfigError
from vflcore.runtime.config import Section, at_least_one, positive

CLIENT_AUTH = ("required", "optional")
#: What stands in for an offline passive party in federated inference (``serving.federated``):
#: nothing (the request fails with UNAVAILABLE), zeros, or its mean representation over training.
DEGRADED_MODES = ("none", "zeros", "mean")
_LIMIT_KEYS = ("max_connections", "handshake_timeout_s", "header_timeout_s", "body_timeout_s", "max_body_bytes")
_KEYS = ("enabled", "grpc_listen", "rest_listen", "client_auth", "allow_party_certificates", "degraded", *_LIMIT_KEYS)


@dataclass(frozen=True)
class RestLimits:
    """What callers may hold of the REST endpoint (``vflserver.inference.rest``); the defaults are ``[serving]``'s."""

    max_connections: int = 256
    handshake_timeout_s: float = 5.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_bytes: int = 64 << 20


@dataclass(frozen=True)
class ServingConfig:
    """Whether to serve, where the two endpoints listen, who may call, and how to answer with a party offline."""

    enabled: bool = False
    grpc_listen: str = "127.0.0.1:8001"
    rest_listen: str = "127.0.0.1:8000"
    client_auth: str = "required"
    #: Whether a party's certificate may call the endpoint (``serving.access``); off by default.
    allow_party_certificates: bool = False
    degraded: str = "none"
    rest_limits: RestLimits = RestLimits()

    @property
    def require_client_cert(self) -> bool:
        return self.client_auth == "required"


def serving_config_from(doc: Mapping[str, Any], source: Path | None = None) -> ServingConfig:
    """Build a ServingConfig from a parsed TOML document; a missing ``[serving]`` table gives the defaults."""
    sec = Section(doc, "serving", source)
    unknown = sorted(set(sec.raw) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{sec.where}: [serving] has no key {unknown[0]!r}; the keys are {list(_KEYS)}")
    defaults = ServingConfig()
    flags = {}
    for key in ("enabled", "allow_party_certificates"):
        flags[key] = sec.raw.get(key, getattr(defaults, key))
        if not isinstance(flags[key], bool):
            raise ConfigError(f"{sec.where}: [serving] {key} = {flags[key]!r} must be true or false")
    config = ServingConfig(
        enabled=flags["enabled"],
        allow_party_certificates=flags["allow_party_certificates"],
        grpc_listen=sec.text("grpc_listen", defaults.grpc_listen),
        rest_listen=sec.text("rest_listen", defaults.rest_listen),
        client_auth=sec.text("client_auth", defaults.client_auth),
        degraded=sec.text("degraded", defaults.degraded),
        rest_limits=_rest_limits(sec),
    )
    for key in ("grpc_listen", "rest_listen"):
        try:
            split_listen(getattr(config, key))
        except ValueError as exc:
            raise ConfigError(f"{sec.where}: [serving] {key}: {exc}") from None
    if config.client_auth not in CLIENT_AUTH:
        raise ConfigError(
            f"{sec.where}: [serving] client_auth = {config.client_auth!r}; choose one of {list(CLIENT_AUTH)}"
        )
    if config.degraded not in DEGRADED_MODES:
        raise ConfigError(
            f"{sec.where}: [serving] degraded = {config.degraded!r}; choose one of {list(DEGRADED_MODES)}"
        )
    if config.grpc_listen == config.rest_listen and not config.grpc_listen.endswith(":0"):
        raise ConfigError(f"{sec.where}: [serving] grpc_listen and rest_listen are both {config.grpc_listen!r}")
    return config


def _rest_limits(sec: Section) -> RestLimits:
    """The REST endpoint's limits: whole numbers of connections and bytes, seconds above 0."""
    defaults = RestLimits()
    values: dict[str, Any] = {
        key: (positive if key.endswith("_s") else at_least_one)(sec, key, getattr(defaults, key)) for key in _LIMIT_KEYS
    }
    return RestLimits(**values)


def split_listen(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6 address]:port``) as (host, port); ValueError says what is wrong."""
    host, sep, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{address!r} must look like host:port, e.g. 127.0.0.1:8001 (port 0 picks a free port)")
    return host, int(port_text)
