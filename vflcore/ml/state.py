"""A party's training state as plain tensors and numbers, and back: what a checkpoint holds.

A resumed job must produce the model an uninterrupted run would have produced, step for step.
That needs more than the weights: the optimizers' moments, every random generator that will
still draw (torch's global one draws the top model's dropout masks; a party's delay scenario
has its own NumPy generator), and each algorithm's own state (VIMADMM's duals, the async
caches, APFed's and AdptVFedConv's phases). Each algorithm names the attributes that hold its
state (``checkpointed``); ``capture`` and ``restore`` walk them, so one mechanism serves every
algorithm and a new attribute is one name added to a tuple.

Everything becomes tensors, numbers, strings, lists, tuples and dicts, which
``torch.load(weights_only=True)`` reads back without unpickling any code.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["capture", "restore", "restore_rng", "rng_state"]

#: Marks a packed NumPy generator, so ``restore`` can tell it from a plain dict.
_GENERATOR = "__numpy_generator__"
_ARRAY = "__numpy_array__"


def capture(owner: object, names: Iterable[str]) -> dict[str, Any]:
    """The state held by ``owner``'s attributes ``names`` (dotted names reach into a member)."""
    return {name: _pack(_get(owner, name)) for name in names}


def restore(owner: object, state: dict[str, Any], names: Iterable[str]) -> None:
    """Put ``state`` (from ``capture``) back into ``owner``'s attributes, in place where it can.

    Modules and optimizers load their state dicts into the objects that exist (the optimizer
    keeps pointing at the model's parameters); everything else is replaced. A name missing from
    ``state`` is an error that names it: the checkpoint was written by another algorithm.
    """
    for name in names:
        if name not in state:
            raise KeyError(f"the checkpoint holds no {name!r}; it was written by another algorithm or version")
        _set(owner, name, _load_into(_get(owner, name), state[name]))


def rng_state() -> dict[str, Any]:
    """The process-wide generators: torch's (dropout masks), NumPy's legacy one and Python's."""
    numpy_state = np.random.get_state(legacy=False)
    assert isinstance(numpy_state, dict)
    return {
        "torch": torch.get_rng_state(),
        "numpy": _pack(numpy_state),
        "python": _pack(random.getstate()),
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Set the process-wide generators to ``state`` (from ``rng_state``)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(_unpack(state["numpy"]))
    python = _unpack(state["python"])
    random.setstate((python[0], tuple(python[1]), python[2]))


def _get(owner: object, dotted: str) -> Any:
    for part in dotted.split("."):
        owner = getattr(owner, part)
    return owner


def _set(owner: object, dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    setattr(_get(owner, ".".join(path)) if path else owner, last, value)


def _load_into(current: Any, saved: Any) -> Any:
    """``saved`` loaded into ``current`` where ``current`` is a live object, else unpacked in its place."""
    if isinstance(current, nn.Module | torch.optim.Optimizer):
        current.load_state_dict(saved)
        return current
    if isinstance(current, np.random.Generator):
        current.bit_generator.state = _unpack(saved)["state"]
        return current
    if isinstance(current, list | tuple) and isinstance(saved, list | tuple) and len(current) == len(saved):
        return type(current)(_load_into(c, s) for c, s in zip(current, saved, strict=True))
    return _unpack(saved)


def _pack(value: Any) -> Any:
    """``value`` as something ``torch.load(weights_only=True)`` reads back."""
    if isinstance(value, nn.Module | torch.optim.Optimizer):
        return value.state_dict()
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.random.Generator):
        return {_GENERATOR: True, "state": _pack(value.bit_generator.state)}
    if isinstance(value, np.ndarray):
        return {_ARRAY: True, "dtype": value.dtype.str, "data": torch.from_numpy(np.array(value, copy=True))}
    if isinstance(value, dict):
        return {k: _pack(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and _plain(value):
        return list(value) if isinstance(value, list) else tuple(value)
    if isinstance(value, list):
        return [_pack(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_pack(v) for v in value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.integer | np.floating):
        return value.item()
    raise TypeError(f"cannot checkpoint a {type(value).__name__}; keep state in tensors, arrays or numbers")


#: Values ``_pack`` keeps as they are; exact types, so a subclass (a NumPy float) takes the long way.
#: ``vflalgorithms.divergence.nonfinite_state`` checks lists of them in one loop too.
PLAIN_TYPES = frozenset({type(None), bool, int, float, str})


def _plain(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every item is a plain number or string, so the sequence packs as a copy of itself.

    Python's generator state is 625 ints: packed one call each, it took about 1 ms of every
    checkpoint of every party (measured 2026-11-28), more than writing the file.
    """
    return all(type(v) in PLAIN_TYPES for v in values)


def _unpack(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_ARRAY) is True:
            return value["data"].numpy().astype(np.dtype(value["dtype"]), copy=True)
        if value.get(_GENERATOR) is True:
            return {"state": _unpack(value["state"])}
        return {k: _unpack(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unpack(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_unpack(v) for v in value)
    return value
