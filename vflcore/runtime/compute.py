"""Where a party's bulk compute runs: in its own process ("local") or on a Ray cluster it runs ("ray").

The embedded default is "local": one process per party, using its local cores (PSI's process
pool, training's torch threads). A party that outgrows one machine sets ``[compute] engine =
"ray"`` and points ``ray_address`` at a Ray cluster it already operates; nothing here starts or
manages a cluster, and the product has no scheduler of its own. What runs there (PSI's hashing and
blinding, ``vfl-score``'s batch scoring) and what crosses between the cluster's nodes is in
``docs/explanation/scale.md``.

Ray is an optional extra (``pip install vfl-service[ray]``), imported only when the engine is
"ray": a party on the local engine never pays its import time or needs it installed.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, Protocol

import structlog

from vflcore.errors import ConfigError

__all__ = [
    "COMPUTE_KEYS",
    "ENGINES",
    "LOCAL",
    "RAY_EXTRA",
    "RAY_UNSET",
    "ComputeEngine",
    "connect",
    "engine_setting",
    "ray_address_setting",
    "ray_installed",
    "require_ray",
]

ENGINES: Final = ("local", "ray")
#: The keys of ``[compute]``, in both daemons' configs (``device`` is read by ``config._device``).
COMPUTE_KEYS: Final = ("device", "engine", "ray_address")
#: What a user installs to get the Ray engine.
RAY_EXTRA: Final = "pip install 'vfl-service[ray]'"
#: What an unset ``ray_address`` means, in the words of ``docs/reference/configuration.md``.
RAY_UNSET: Final = "Ray's own: `RAY_ADDRESS`, else this host's cluster"

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ComputeEngine:
    """A party's ``[compute] engine`` and ``ray_address``, as one value its PSI and scoring are handed.

    ``ray_address`` is what ``ray.init(address=...)`` takes: ``"host:6379"`` (a node of the
    cluster, from a process on one of its nodes), ``"ray://host:10001"`` (Ray Client, from outside
    the cluster), ``"auto"`` or ``"local"`` (a private single-machine instance). None means Ray's own
    rule: the ``RAY_ADDRESS`` environment variable, else the cluster ``ray start`` runs on this host.
    """

    name: str = "local"
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ConfigError(f"compute engine {self.name!r}; choose one of {list(ENGINES)}")

    @property
    def on_ray(self) -> bool:
        return self.name == "ray"

    def describe(self) -> str:
        """For log lines and errors: the engine, and the cluster's address when it is Ray."""
        return f"ray at {self.ray_address or 'auto'}" if self.on_ray else "local"


LOCAL: Final = ComputeEngine()


class ConfigTable(Protocol):
    """What the readers below use of a config table (``config.Section``): its keys, and its file."""

    @property
    def raw(self) -> Mapping[str, Any]: ...

    @property
    def where(self) -> str: ...


def _text(table: ConfigTable, key: str, default: str | None) -> str | None:
    value = table.raw.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{table.where}: [compute] {key} = {value!r} has the wrong type; give a string")
    return value


def engine_setting(table: ConfigTable, key: str = "engine", default: str = "local") -> str:
    """``[compute] engine``: "local" (this process and its cores) or "ray" (the party's Ray cluster).

    "ray" needs the optional extra installed; that is checked here, without importing Ray, so a
    daemon without it stops at start with the command that installs it.
    """
    engine = _text(table, key, default) or default
    if engine not in ENGINES:
        choices = " or ".join(f'"{name}"' for name in ENGINES)
        raise ConfigError(f"{table.where}: [compute] {key} = {engine!r}; give {choices}")
    if engine == "ray" and not ray_installed():
        raise ConfigError(f'{table.where}: [compute] {key} = "ray", but Ray is not installed here: {RAY_EXTRA}')
    return engine


def ray_address_setting(table: ConfigTable, key: str = "ray_address", default: str | None = None) -> str | None:
    """``[compute] ray_address``: where the party's Ray cluster is; refused unless ``engine = "ray"``."""
    address = _text(table, key, default)
    if address is None:
        return None
    if not address.strip():
        raise ConfigError(f'{table.where}: [compute] {key} = ""; give the cluster\'s address, e.g. "ray://head:10001"')
    if table.raw.get("engine", "local") != "ray":
        raise ConfigError(
            f'{table.where}: [compute] {key} is set but engine is not "ray"; set engine = "ray" to use the cluster, '
            f"or remove {key}"
        )
    return address


def ray_installed() -> bool:
    """Whether ``import ray`` would work, without paying for the import."""
    return importlib.util.find_spec("ray") is not None


def require_ray(where: str = "[compute] engine") -> ModuleType:
    """The ``ray`` module; a ConfigError saying how to install it if it is missing."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f'{where} = "ray", but Ray is not installed here: {RAY_EXTRA}') from None
    return ray


def connect(engine: ComputeEngine) -> ModuleType:
    """Join this process to the party's Ray cluster as a driver, once; the ``ray`` module.

    Idempotent: a process already connected (a daemon checked at start, or a test's cluster)
    keeps its connection. ``log_to_driver=False``: what workers print stays in the cluster's own
    log files instead of being copied into this daemon's log (our tasks print nothing; a
    library's warning there is the cluster operator's to read). Raises ConnectionError, naming the
    address, if there is no cluster there.
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    address = engine.ray_address or "auto"
    _probe(address)
    # ray.init puts in a SIGTERM handler of its own (sys.exit), which would cut short the daemon's
    # clean shutdown (``daemon.ShutdownSignals``) or an SDK user's handler: the previous one is put back.
    on_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ConnectionError(
            f'[compute] engine = "ray": no Ray cluster at {address} ({exc}); start one (ray start --head) or '
            "set [compute] ray_address to its address"
        ) from None
    finally:
        if threading.current_thread() is threading.main_thread() and on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
    log.info("ray_connected", address=address, cpus=int(ray.cluster_resources().get("CPU", 0)))
    return ray


#: How long a daemon waits for a TCP answer from an explicit ``ray_address`` before it gives up.
PROBE_TIMEOUT_S: Final = 5.0


def _probe(address: str) -> None:
    """ConnectionError at once if nothing listens at an explicit ``host:port`` address.

    ``ray.init`` itself retries an unreachable GCS for minutes before it fails; a daemon at start
    should say in seconds that the address is wrong. "auto", "local" and Ray's other address
    forms are left to Ray, which fails fast for them.
    """
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise ConnectionError(
            f'[compute] engine = "ray": nothing answers at ray_address {address} ({exc.strerror or exc}); '
            "check the address and that the cluster runs (ray status on its head node)"
        ) from None
