"""The active party's own models: which factories an algorithm takes, and their check at submission.

A job's ``[model]`` table may name a factory (``package.module:function``) for each model the
active party trains, in the same style as a passive party's ``[model] factory``. Each algorithm
says which ones it takes through ``ServerAlgorithm.model_slots``: the arguments the factory is
called with, and the output shape a probe batch must give. ``check_factories`` imports and probes
every named factory when the job is submitted, so a factory that cannot work is refused with its
key named before any party is contacted, not after PSI at the first step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from vflcore.errors import ConfigError
from vflcore.ml.models import build_seeded, load_factory

__all__ = ["FACTORY_KEYS", "PROBE_ROWS", "ModelSlot", "check_factories", "refuse_untaken", "resolve_factories"]

#: Every factory key a job's ``[model]`` table may hold; which ones an algorithm takes varies.
FACTORY_KEYS = (
    "own_bottom_factory",
    "top_factory",
    "encoder_factory",
    "head_factory",
    "extractor_factory",
    "classifier_factory",
)
#: Rows of the probe batch: more than one, so that a model with batch statistics can run on it.
PROBE_ROWS = 4


@dataclass(frozen=True)
class ModelSlot:
    """One model an algorithm lets the active party bring.

    The factory is called as ``factory(*args)``; run in eval mode on a batch of shape ``probe``, the
    model must return a tensor of shape ``output``. ``what`` says in words what the model is.
    """

    what: str
    args: tuple[int, ...]
    probe: tuple[int, ...]
    output: tuple[int, ...]


def _probe(key: str, spec: str, factory: Callable[..., nn.Module], slot: ModelSlot, table: str) -> None:
    """Build once and run the probe batch; a ConfigError naming ``key`` if anything is off."""
    arguments = ", ".join(map(str, slot.args))
    try:
        model = build_seeded(lambda: factory(*slot.args), 0)
    except Exception as exc:  # the user's code: any failure is a refusal that quotes it
        raise ConfigError(f"[{table}] {key} = {spec!r}: calling it with ({arguments}) failed: {exc}") from None
    probe = torch.zeros(slot.probe)
    try:
        model.eval()
        with torch.no_grad():
            output = model(probe)
    except Exception as exc:
        raise ConfigError(
            f"[{table}] {key} = {spec!r}: the model it builds ({arguments}) fails on a probe batch of shape "
            f"{list(slot.probe)} ({exc}); it must take {slot.what}'s input"
        ) from None
    shape = tuple(output.shape) if isinstance(output, torch.Tensor) else None
    if shape != slot.output:
        got = list(shape) if shape is not None else type(output).__name__
        raise ConfigError(
            f"[{table}] {key} = {spec!r}: on a probe batch of shape {list(slot.probe)} the model returns {got}; "
            f"{slot.what} must return shape {list(slot.output)}"
        )


def refuse_untaken(given: Mapping[str, str], algorithm: str, takes: tuple[str, ...]) -> None:
    """ConfigError naming the first key of ``given`` that ``algorithm`` does not take (nothing is imported)."""
    for key in sorted(given):
        if key not in takes:
            offered = ", ".join(takes) or "none"
            raise ConfigError(
                f"[model] {key}: {algorithm} does not take this model (the factories it takes: {offered})"
            )


def resolve_factories(
    given: Mapping[str, str], algorithm: str, takes: tuple[str, ...], *, table: str = "model"
) -> dict[str, Callable[..., nn.Module]]:
    """Import every factory ``given`` names (key → ``module:function``); refuses a key ``algorithm`` does not take."""
    refuse_untaken(given, algorithm, takes)
    resolved: dict[str, Callable[..., nn.Module]] = {}
    for key, spec in sorted(given.items()):
        try:
            resolved[key] = load_factory(spec)
        except ValueError as exc:
            raise ConfigError(f"[{table}] {key}: {exc}") from None
    return resolved


def check_factories(
    given: Mapping[str, str],
    algorithm: str,
    takes: tuple[str, ...],
    slots: Mapping[str, ModelSlot],
    *,
    table: str = "model",
) -> None:
    """Import and probe every factory ``given`` names against the algorithm's ``slots``; ConfigError on the first fault.

    ``takes`` is every key the algorithm takes; ``slots`` those it can use with this data (no
    own bottom model when the active party holds no features). ``table`` is the table errors
    name: ``model``, or ``distill`` for the distilled student's factory.
    """
    for key, factory in resolve_factories(given, algorithm, takes, table=table).items():
        if key not in slots:
            raise ConfigError(
                f"[model] {key}: the active party's dataset has no feature columns, so {algorithm} builds no "
                "model for this key; remove it or give the active party features"
            )
        _probe(key, given[key], factory, slots[key], table)
