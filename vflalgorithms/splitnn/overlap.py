"""Overlapping the link with the parties' work in SplitNN and FedBCD: micro-batches, and (opt-in) staleness.

**Micro-batches** (``[algorithm] micro_batches``) cut one step into parts. Without them a step
runs in turn: the passive party computes h^k of the whole batch, the whole upload crosses the
link, the server computes, the whole gradient crosses back, the party steps.
With ``[algorithm] micro_batches = m`` the party uploads each of the batch's m parts as soon as
its forward pass has produced it, the server runs the top model on a part as soon as every party's
copy of it is in and sends that part's gradient back at once, and the party back-propagates each
part's gradient as it arrives. Uploads, the server's work and downloads of different parts then
overlap, and a step costs about one transfer plus one round trip instead of two transfers plus one.

The maths is the step's, not an approximation of it: the loss of part i is scaled by its share
of the batch's rows (the losses are row means), so the gradients summed over the parts are the
whole batch's, and every party takes one optimizer step per batch, as before. Only float rounding
differs (sums taken in a different order), and ``m = 1`` is the same operations as no parts at
all. Models whose output for a row depends on other rows of the batch (batch normalisation)
would see smaller batches, and dropout draws its masks per part; the default models have neither.

On the wire a part is a batch index of its own: part i of batch b travels as batch
``wire(b, i)``, numbered consecutively through the epoch, so the streams, the server's
expectations and a resumed epoch work on parts exactly as they work on batches.

**A pipeline** (``[algorithm] pipeline_depth = d``, default 0) changes the maths, and is never on
unless asked for. A passive party then sends the embeddings of up to d batches beyond the one
whose gradient it waits for, so the round trip no longer stalls it: the server always has the
next batch at hand. The price is staleness: batch b's embedding was computed before the
gradients of the d batches before it were applied, and batch b's gradient is pushed into h^k
recomputed from the party's current weights (as FedBCD's local steps push a stale gradient), so
the result is no longer SplitNN's and no reference reproduces it. A checkpoint inside an epoch
holds the weights after its steps, not the embeddings already in flight: a job resumed there
restarts the pipeline, and from then on differs from the run that was not interrupted.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate, pairwise
from typing import Any, NamedTuple

import numpy as np

from vflalgorithms.options import whole_numbers
from vflcore.errors import ConfigError

#: ``[algorithm] micro_batches``: parts per batch (1: whole); ``pipeline_depth``: batches sent ahead (0: none).
OVERLAP_DEFAULTS: Mapping[str, Any] = {"micro_batches": 1, "pipeline_depth": 0}


class Overlap(NamedTuple):
    """A job's overlap options, as the halves read them."""

    micro_batches: int
    pipeline_depth: int


def overlap_options(options: Mapping[str, Any]) -> Overlap:
    """``micro_batches`` and ``pipeline_depth`` from a job's algorithm options, else ``OVERLAP_DEFAULTS``.

    The one place their defaults are read: an algorithm without these options (async, the VIM
    family) takes whole batches and no staleness.
    """
    given = {**OVERLAP_DEFAULTS, **{name: options[name] for name in OVERLAP_DEFAULTS if name in options}}
    return Overlap(int(given["micro_batches"]), int(given["pipeline_depth"]))


def check_overlap(options: Mapping[str, Any]) -> None:
    """``micro_batches`` is a whole number of at least 1, ``pipeline_depth`` one of at least 0."""
    whole_numbers(options, "micro_batches")
    depth = options["pipeline_depth"]
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ConfigError(
            f"[algorithm] pipeline_depth must be a whole number of at least 0 (0: no staleness), got {depth!r}"
        )


def part_bounds(rows: int, parts: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each part of a batch of ``rows`` rows: contiguous, sizes within one row.

    A batch smaller than ``parts`` is cut into single rows.
    """
    count = max(1, min(parts, rows))
    edges = [rows * i // count for i in range(count + 1)]
    return list(pairwise(edges))


class MicroBatches:
    """How each batch of one epoch is cut into parts, and which batch index each part travels as."""

    def __init__(self, batches: list[np.ndarray], parts: int) -> None:
        self._bounds = [part_bounds(len(rows), parts) for rows in batches]
        self._first = [0, *accumulate(len(b) for b in self._bounds)]

    def bounds(self, batch: int) -> list[tuple[int, int]]:
        """The parts of ``batch``, as row ranges within it."""
        return self._bounds[batch]

    def wire(self, batch: int, part: int = 0) -> int:
        """The batch index part ``part`` of ``batch`` travels as; ``wire(len(batches))`` ends the epoch."""
        return self._first[batch] + part


__all__ = ["OVERLAP_DEFAULTS", "MicroBatches", "Overlap", "check_overlap", "overlap_options", "part_bounds"]
