"""Which X25519 the PSI blinders run: Intel's multi-buffer (eight points a call) or OpenSSL's (one).

``[psi] x25519`` in either party's config: ``"auto"`` (the default) takes the multi-buffer path
where it loads and the CPU has AVX-512 IFMA, else OpenSSL's; ``"multibuffer"`` insists (a host
without it exits 2 at start, naming why); ``"openssl"`` turns it off. Both give the same bytes
on every input (``vflcore.psi.x25519_mb``), so two parties may run different ones.

The daemons call ``choose_at_start`` once at start: it uses the setting and logs the choice and
its reason. The setting, not the choice, travels to the blinders' worker processes and Ray
tasks: each resolves it where it runs, so a Ray worker on a node with IFMA takes the fast path
and one without does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import structlog

from vflcore.errors import ConfigError
from vflcore.psi.x25519_mb import MultiBufferX25519, Unavailable, load
from vflcore.runtime.config import X25519_SETTINGS

__all__ = ["SETTINGS", "Choice", "choose", "choose_at_start", "current", "multibuffer_for", "use"]

SETTINGS: Final = X25519_SETTINGS
_U: Final = 32


@dataclass(frozen=True)
class Choice:
    """What ``[psi] x25519`` comes to on this host: "multibuffer" or "openssl", and why, in words."""

    name: str
    reason: str


def choose(setting: str) -> Choice:
    """Resolve ``setting`` on this host; ConfigError for "multibuffer" where it cannot run, or a wrong value."""
    if setting not in SETTINGS:
        raise ConfigError(f"[psi] x25519 = {setting!r}; give one of {', '.join(repr(s) for s in SETTINGS)}")
    if setting == "openssl":
        return Choice("openssl", '[psi] x25519 = "openssl"')
    loaded = load()
    if isinstance(loaded, Unavailable):
        if setting == "multibuffer":
            raise ConfigError(f'[psi] x25519 = "multibuffer", but {loaded.reason}; set "auto" or "openssl"')
        return Choice("openssl", loaded.reason)
    return Choice("multibuffer", f"{loaded.where} loaded and this CPU has AVX-512 IFMA")


_setting = "auto"


def use(setting: str) -> Choice:
    """Make ``setting`` this process's (and its blinders' workers'); returns what it comes to here."""
    global _setting
    choice = choose(setting)
    _setting = setting
    return choice


def choose_at_start(setting: str) -> None:
    """Resolve ``[psi] x25519`` on this host and log the choice with its reason (``psi_x25519``).

    ConfigError, naming why, for "multibuffer" where Intel's library cannot run: the daemons exit 2.
    """
    choice = use(setting)
    structlog.get_logger(__name__).info("psi_x25519", setting=setting, chosen=choice.name, reason=choice.reason)


def current() -> str:
    """The setting in force in this process: what a blinder hands its workers."""
    return _setting


def multibuffer_for(setting: str, points: Sequence[bytes]) -> MultiBufferX25519 | None:
    """The multi-buffer X25519 to blind ``points`` with under ``setting``, or None for OpenSSL's.

    None too for a batch with an item that is not 32 bytes: OpenSSL's path names it in its error.
    """
    if setting == "openssl" or not all(type(u) is bytes and len(u) == _U for u in points):
        return None
    loaded = load()
    return None if isinstance(loaded, Unavailable) else loaded
