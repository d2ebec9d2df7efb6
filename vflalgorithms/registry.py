"""The registry of algorithms: each one's ``AlgorithmSpec`` by the name ``[job] algorithm`` uses, found by discovery.

An algorithm is one folder under ``vflalgorithms/``. Its ``spec.py`` registers an
``AlgorithmSpec``: the name, the two halves (``vflalgorithms.halves``), the in-process reference
and its options (defaults and checks). The daemons reach algorithms only through
``algorithm_spec(name)`` and never branch on an algorithm's name, so adding an algorithm adds a
folder and nothing else.

Discovery: ``algorithm_spec(name)`` imports ``vflalgorithms.<folder>.spec`` for every folder
the first time it is called. Code outside this package (a plugin, a test) registers its own
spec by calling ``register`` when it is imported.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vflalgorithms.halves import ClientAlgorithm, ServerAlgorithm
from vflcore.errors import ConfigError

#: Checks an algorithm's completed options; raises ConfigError naming the key.
OptionsCheck = Callable[[Mapping[str, Any]], None]


def _no_check(options: Mapping[str, Any]) -> None:
    """For an algorithm whose options need no check beyond their names."""


def _resolve(target: type | str) -> Any:
    """A class, or the class a ``"package.module:Class"`` string names (imported on first use)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything the daemons need to know about one algorithm, by the name ``[job] algorithm`` uses.

    The halves and the reference may be given as ``"module:Class"`` strings: a ``spec.py`` then
    need not import the halves, which import its tensor names (no import cycle), and listing the
    algorithms does not build any of them.
    """

    name: str
    active: type[ServerAlgorithm] | str
    passive: type[ClientAlgorithm] | str
    #: Each option's default (the ``[algorithm]`` table); an option not listed here is refused.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    check: OptionsCheck = _no_check
    #: The in-process reference (``from_tables``, ``train_epoch``, ``step_losses``), if it has one.
    reference: type | str | None = None
    #: The options that change how far a step goes (VIMADMM's ``rho``): named, with their values,
    #: in the message of a job that diverged (``divergence_advice``), beside ``[job] learning_rate``.
    tuning: tuple[str, ...] = ()

    def active_half(self) -> type[ServerAlgorithm]:
        """The active party's half."""
        half: type[ServerAlgorithm] = _resolve(self.active)
        return half

    def passive_half(self) -> type[ClientAlgorithm]:
        """A passive party's half."""
        half: type[ClientAlgorithm] = _resolve(self.passive)
        return half

    def reference_class(self) -> Any:
        """The in-process reference, or None."""
        return None if self.reference is None else _resolve(self.reference)

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` checked against this algorithm's options and completed with their defaults."""
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "none"
            raise ConfigError(f"[algorithm] {unknown[0]} is not an option of {self.name!r} (its options: {allowed})")
        options = {**self.defaults, **given}
        self.check(options)
        return options


_REGISTRY: dict[str, AlgorithmSpec] = {}
_DISCOVERY = threading.Lock()
_discovered = False


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Make ``spec`` available by its name; returns it, so a ``spec.py`` can write ``SPEC = register(...)``."""
    known = _REGISTRY.get(spec.name)
    if known is not None and known != spec:
        raise ConfigError(f"two algorithms are registered as {spec.name!r}: {known.active} and {spec.active}")
    _REGISTRY[spec.name] = spec
    return spec


def _discover() -> None:
    """Import ``vflalgorithms.<folder>.spec`` for every folder, once per process."""
    global _discovered
    with _DISCOVERY:
        if _discovered:
            return
        package = importlib.import_module("vflalgorithms")
        for module in pkgutil.iter_modules(package.__path__):
            if module.ispkg:
                importlib.import_module(f"vflalgorithms.{module.name}.spec")
        _discovered = True


def algorithms() -> dict[str, AlgorithmSpec]:
    """Every registered algorithm, by name."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The spec registered as ``name``, or a ConfigError listing what exists."""
    found = algorithms()
    if name not in found:
        raise ConfigError(f"[job] algorithm = {name!r} is not available; choose one of {sorted(found)}")
    return found[name]
