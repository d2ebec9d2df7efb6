"""Micro-batches: how a batch is cut, which wire index each part takes, and who may ask for them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vflalgorithms.options import algorithm_options
from vflalgorithms.splitnn.overlap import MicroBatches, part_bounds
from vflcore.errors import ConfigError


@pytest.mark.parametrize(("rows", "parts"), [(64, 1), (64, 5), (1024, 4), (7, 3), (3, 8), (1, 4)])
def test_parts_cover_the_batch_in_order_and_differ_by_at_most_one_row(rows: int, parts: int) -> None:
    bounds = part_bounds(rows, parts)
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert len(bounds) == min(parts, rows)


def test_one_part_is_the_batch_and_its_own_index() -> None:
    batches = [np.arange(64), np.arange(64, 128), np.arange(128, 150)]
    parts = MicroBatches(batches, 1)
    assert [parts.wire(b) for b in range(4)] == [0, 1, 2, 3]
    assert parts.bounds(2) == [(0, 22)]


def test_parts_are_numbered_through_the_epoch_without_gaps() -> None:
    """A short last batch gets fewer parts; indexes stay consecutive, so one stream carries them all."""
    batches = [np.arange(8), np.arange(8, 16), np.arange(16, 18)]
    parts = MicroBatches(batches, 4)
    indexes = [parts.wire(b, i) for b in range(3) for i in range(len(parts.bounds(b)))]
    assert indexes == list(range(10))
    assert parts.wire(3) == 10  # the end of the epoch: what the download stream counts to
    assert parts.wire(1) == 4  # a run resumed at batch 1 starts its stream there


@pytest.mark.parametrize("algorithm", ["splitnn", "fedbcd"])
def test_splitnn_and_fedbcd_take_the_option_with_default_one(algorithm: str) -> None:
    assert algorithm_options(algorithm, {})["micro_batches"] == 1
    assert algorithm_options(algorithm, {"micro_batches": 4})["micro_batches"] == 4


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "4"])
def test_a_part_count_that_is_not_a_whole_number_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[algorithm\] micro_batches must be a whole number"):
        algorithm_options("splitnn", {"micro_batches": value})


@pytest.mark.parametrize("algorithm", ["async", "vimsgd", "vimadmm"])
def test_algorithms_that_do_not_cut_batches_refuse_the_option(algorithm: str) -> None:
    with pytest.raises(ConfigError, match=rf"micro_batches is not an option of '{algorithm}'"):
        algorithm_options(algorithm, {"micro_batches": 4})
