"""The parties' noise keys: secret, kept, and the only source of a defence's noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vflcore.errors import ConfigError
from vflprivacy.noise import KEY_FILE, RowNormals, noise_generator, noise_key


def test_the_key_is_created_once_with_mode_0600_and_kept(tmp_path: Path) -> None:
    key = noise_key(tmp_path / "party-2")
    assert (tmp_path / "party-2" / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert noise_key(tmp_path / "party-2") == key
    assert noise_key(tmp_path / "party-3") != key


def test_the_same_place_draws_the_same_noise_and_another_place_other_noise(tmp_path: Path) -> None:
    key = noise_key(tmp_path)
    first = noise_generator(key, "embedding", 2, 0, 5).standard_normal(64)
    np.testing.assert_array_equal(first, noise_generator(key, "embedding", 2, 0, 5).standard_normal(64))
    for other in (noise_generator(key, "embedding", 2, 0, 6), noise_generator(key, "marvell", 2, 0, 5)):
        assert not np.array_equal(first, other.standard_normal(64))
    assert not np.array_equal(first, noise_generator(bytes(32), "embedding", 2, 0, 5).standard_normal(64))


def test_a_damaged_key_is_refused_by_file_name(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_bytes(b"short")
    with pytest.raises(ConfigError, match=KEY_FILE):
        noise_key(tmp_path)


class TestRowNormals:
    """Issue 48: noise a row's repeats cannot average away; each draw still standard normal."""

    @staticmethod
    def draws(key: bytes, epoch: int, rows: np.ndarray, persistence: float, width: int = 4) -> np.ndarray:
        fresh = noise_generator(key, "label_defence", epoch, 0, 2)
        return RowNormals(fresh, key, "label_defence", (2, 0), rows, persistence).standard_normal((len(rows), width))

    def test_no_persistence_is_the_fresh_generators_draws_exactly(self) -> None:
        key, rows = bytes(range(32)), np.arange(64)
        fresh = noise_generator(key, "label_defence", 3, 0, 2).standard_normal((64, 4))
        np.testing.assert_array_equal(self.draws(key, 3, rows, 0.0), fresh)
        normals = RowNormals(noise_generator(key, "x", 1), key, "x", (2, 0), rows, 0.0)
        expected = noise_generator(key, "x", 1).normal(0, 2, (64, 4))
        np.testing.assert_array_equal(normals.normal(0.0, 2.0, (64, 4)), expected)

    def test_a_rows_share_is_the_same_in_every_epoch_wherever_the_row_is(self) -> None:
        """Epochs 0 and 1 with the rows in another order: the same row's draws correlate at ρ, and stay N(0, 1)."""
        key, rows, rho = bytes(range(32)), np.arange(1500), 0.75
        order = np.random.default_rng(1).permutation(rows)
        first = self.draws(key, 0, rows, rho)
        second = self.draws(key, 1, order, rho)[np.argsort(order)]
        assert abs(float(first.mean())) < 0.03 and abs(float(first.var()) - 1) < 0.03
        assert abs(float(np.mean(first * second)) - rho) < 0.03
        uncorrelated = self.draws(key, 1, rows, 0.0)
        assert abs(float(np.mean(first * uncorrelated))) < 0.03

    def test_an_average_over_epochs_keeps_the_persistent_share(self) -> None:
        """10 epochs averaged: variance ρ + (1 − ρ)/10, where fresh noise alone keeps a tenth."""
        key, rows = bytes(range(32)), np.arange(300)
        for rho in (0.0, 0.5, 0.9):
            average = np.mean([self.draws(key, epoch, rows, rho, width=8) for epoch in range(10)], axis=0)
            assert float(average.var()) == pytest.approx(rho + (1 - rho) / 10, abs=0.04)

    def test_a_share_of_one_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            RowNormals(noise_generator(bytes(32), "x"), bytes(32), "x", (2,), np.arange(3), 1.0)
