"""Scoring a model inside an epoch without changing how it trains.

``ServerAlgorithm.predict`` and ``ClientAlgorithm.embed`` put every model into eval mode
(dropout off, batch norm on its running statistics), as scoring must. At an epoch's end the
next epoch puts them back into training mode; a score taken inside an epoch
(``[job] eval_every_rounds``) must do it itself, or the rest of the epoch would train without
dropout and with frozen batch statistics, and the job would differ from the same job scored
only per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn


@contextmanager
def modes_kept(owner: object) -> Iterator[None]:
    """Put back, on leaving, the training mode of every module ``owner`` holds (as an attribute, in a list or dict)."""
    saved = [(module, module.training) for held in _held(vars(owner).values()) for module in held.modules()]
    try:
        yield
    finally:
        for module, training in saved:
            module.training = training


def _held(values: Any) -> Iterator[nn.Module]:
    for value in values:
        if isinstance(value, nn.Module):
            yield value
        elif isinstance(value, list | tuple):
            yield from _held(value)
        elif isinstance(value, dict):
            yield from _held(value.values())
