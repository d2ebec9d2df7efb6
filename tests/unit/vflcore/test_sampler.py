"""Tests for the schedule in vflcore.job.schedule: the seeded train/test split and per-epoch batches."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from vflcore.job.schedule import epoch_batches, split_rows
from vfltesting.paths import REPO_ROOT


class TestSplitRows:
    def test_partition_sorted_int64(self) -> None:
        """Train and test are disjoint, cover every row, are sorted and int64."""
        train, test = split_rows(100, 0.2, seed=3)
        assert train.dtype == np.int64 and test.dtype == np.int64
        assert len(test) == 20 and len(train) == 80
        assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)
        np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(100))

    def test_test_rows_are_head_of_seeded_permutation(self) -> None:
        """The test rows are the first round(n * fraction) entries of default_rng(seed).permutation(n)."""
        _, test = split_rows(50, 0.3, seed=7)
        expected = np.sort(np.random.default_rng(7).permutation(50)[:15])
        np.testing.assert_array_equal(test, expected)

    def test_same_seed_same_split_other_seed_differs(self) -> None:
        """Parties with the same seed agree; another seed gives another split."""
        a_train, a_test = split_rows(200, 0.25, seed=1)
        b_train, b_test = split_rows(200, 0.25, seed=1)
        np.testing.assert_array_equal(a_train, b_train)
        np.testing.assert_array_equal(a_test, b_test)
        assert not np.array_equal(a_test, split_rows(200, 0.25, seed=2)[1])

    def test_zero_fraction_keeps_every_row_for_training(self) -> None:
        """A test fraction of zero gives an empty test set."""
        train, test = split_rows(5, 0.0, seed=0)
        np.testing.assert_array_equal(train, np.arange(5))
        assert test.shape == (0,) and test.dtype == np.int64

    @pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
    def test_fraction_out_of_range(self, fraction: float) -> None:
        """Fractions outside [0, 1) are rejected."""
        with pytest.raises(ValueError, match="test_fraction must be in"):
            split_rows(10, fraction, seed=0)

    def test_no_training_rows_left(self) -> None:
        """A fraction that rounds every row into test is rejected."""
        with pytest.raises(ValueError, match="leaves no training rows"):
            split_rows(1, 0.6, seed=0)

    def test_no_rows(self) -> None:
        """An empty table cannot be split."""
        with pytest.raises(ValueError, match="num_rows must be at least 1"):
            split_rows(0, 0.2, seed=0)


class TestEpochBatches:
    def test_batches_cover_train_rows_once(self) -> None:
        """Batches have batch_size rows except a smaller last one, and cover every row once."""
        train = np.arange(0, 50, 2, dtype=np.int64)
        batches = epoch_batches(train, 7, seed=0, epoch=0)
        assert [len(b) for b in batches] == [7, 7, 7, 4]
        np.testing.assert_array_equal(np.sort(np.concatenate(batches)), train)
        assert all(b.dtype == np.int64 for b in batches)

    def test_matches_seed_epoch_generator(self) -> None:
        """The order is default_rng([seed, epoch]).permutation(train_rows)."""
        train = np.arange(10, dtype=np.int64)
        batches = epoch_batches(train, 10, seed=4, epoch=2)
        np.testing.assert_array_equal(batches[0], np.random.default_rng([4, 2]).permutation(train))

    def test_epochs_differ_and_repeat(self) -> None:
        """Each epoch has its own order, and recomputing an epoch gives the same batches."""
        train = np.arange(100, dtype=np.int64)
        first = epoch_batches(train, 16, seed=9, epoch=0)
        again = epoch_batches(train, 16, seed=9, epoch=0)
        second = epoch_batches(train, 16, seed=9, epoch=1)
        assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
        assert not np.array_equal(first[0], second[0])

    def test_does_not_modify_input(self) -> None:
        """Shuffling returns new arrays and leaves train_rows untouched."""
        train = np.arange(20, dtype=np.int64)
        epoch_batches(train, 4, seed=0, epoch=0)
        np.testing.assert_array_equal(train, np.arange(20))

    def test_same_batches_in_another_process(self) -> None:
        """A separate interpreter computes identical batches, as a remote party would."""
        code = (
            "import numpy as np; from vflcore.job.schedule import epoch_batches, split_rows;"
            "t, _ = split_rows(300, 0.2, 11); print(np.concatenate(epoch_batches(t, 32, 11, 3)).tolist())"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
        ).stdout
        train, _ = split_rows(300, 0.2, 11)
        assert out.strip() == str(np.concatenate(epoch_batches(train, 32, 11, 3)).tolist())

    def test_empty_train_rows(self) -> None:
        """No training rows give no batches."""
        assert epoch_batches(np.zeros(0, dtype=np.int64), 4, seed=0, epoch=0) == []

    @pytest.mark.parametrize(("batch_size", "epoch", "message"), [(0, 0, "batch_size"), (4, -1, "epoch")])
    def test_invalid_arguments(self, batch_size: int, epoch: int, message: str) -> None:
        """A non-positive batch size or negative epoch is rejected."""
        with pytest.raises(ValueError, match=message):
            epoch_batches(np.arange(4), batch_size, seed=0, epoch=epoch)
