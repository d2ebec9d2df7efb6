"""The stronger attacker of issue 48, on synthetic rows built so that only that attack can read the label.

Each attack gets two checks: it finds a leak that the project's older attacks (plain norm, signed
direction) miss, and it reads chance when the labels are drawn at random. The recorded-run checks
(a real SplitNN job over mTLS) are in tests/integration/privacy/test_privacy_probes.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vflcore.job.privacy import PrivacySpec
from vflprivacy.attacks import (
    abs_direction_attack,
    cluster_attack,
    direction_attack,
    epoch_average,
    known_rows,
    label_attacks,
    norm_attack,
    probe_attack,
    relative_norm_attack,
)
from vflprivacy.label_defences import full_covariance_noise, protect_gradients

ROWS, BATCH = 640, 64
#: How far from 0.5 a figure on random labels may fall: 640 rows, 10 % positives (measured spread well inside).
CHANCE = 0.1


def _labels(seed: int = 0, share: float = 0.1) -> np.ndarray:
    """An imbalanced binary task, as users' fraud or churn tables are: about 10 % positives."""
    labels = (np.random.default_rng(seed).random(ROWS) < share).astype(np.int64)
    labels[:2] = (0, 1)  # both classes, whatever the draw
    return labels


def _batches() -> np.ndarray:
    return np.arange(ROWS) // BATCH


def _random_labels() -> np.ndarray:
    return _labels(seed=99)


def _either_sign(labels: np.ndarray, seed: int = 1) -> np.ndarray:
    """Positives along ±u (a random sign each), negatives orthogonal to u: no signed direction, a clear |cos|."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(len(labels), 8))
    rows[:, 0] = 0.0  # u is the first axis: negatives have no component along it
    signs = rng.choice([-1.0, 1.0], size=len(labels))
    rows[:, 0] = np.where(labels == 1, 4.0 * signs, 0.0)
    return rows


class TestSignAgnosticDirection:
    def test_finds_positives_aligned_in_either_sign(self) -> None:
        labels = _labels()
        rows = _either_sign(labels)
        assert abs(direction_attack(rows, labels, 1, seed=0) - 0.5) < 0.15  # the signed attack is blind here
        assert min(abs_direction_attack(rows, labels, 1, seed=s) for s in range(4)) > 0.9

    def test_random_labels_read_chance(self) -> None:
        rows = _either_sign(_labels())
        assert abs(abs_direction_attack(rows, _random_labels(), 1, seed=0) - 0.5) < CHANCE


def _batch_scaled(labels: np.ndarray, seed: int = 2) -> np.ndarray:
    """Each batch scaled by its own factor (1 to 100); inside a batch, positives twice as long."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(len(labels), 4))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    scale = rng.uniform(1.0, 100.0, size=ROWS // BATCH)[_batches()]
    return rows * scale[:, None] * np.where(labels == 1, 2.0, 1.0)[:, None]


class TestNormRelativeToTheBatch:
    def test_a_batch_wide_scale_hides_nothing_from_the_ratio(self) -> None:
        labels = _labels()
        rows = _batch_scaled(labels)
        relative = relative_norm_attack(rows, labels, _batches())
        assert norm_attack(rows, labels) < 0.75
        assert relative.ratio > 0.95 and relative.dispersion > 0.95

    def test_rows_that_stand_out_either_way_are_found_by_the_dispersion(self) -> None:
        """Positives at half or twice their batch's norm: the ratio's ranking is split, |ratio - 1| is not."""
        labels = _labels()
        rng = np.random.default_rng(3)
        factor = np.where(labels == 1, rng.choice([0.4, 2.5], size=ROWS), rng.uniform(0.9, 1.1, size=ROWS))
        rows = rng.normal(size=(ROWS, 4))
        rows = rows / np.linalg.norm(rows, axis=1, keepdims=True) * factor[:, None]
        relative = relative_norm_attack(rows, labels, _batches())
        assert relative.dispersion > 0.95 > relative.ratio

    def test_random_labels_read_chance(self) -> None:
        relative = relative_norm_attack(_batch_scaled(_labels()), _random_labels(), _batches())
        assert abs(relative.ratio - 0.5) < CHANCE and abs(relative.dispersion - 0.5) < CHANCE

    def test_multi_class_is_not_defined(self) -> None:
        relative = relative_norm_attack(np.ones((6, 2)), np.array([0, 1, 2, 0, 1, 2]), np.zeros(6))
        assert math.isnan(relative.ratio) and math.isnan(relative.dispersion)


def _noisy_releases(labels: np.ndarray, epochs: int, seed: int = 4) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """A weak per-row label signal under noise drawn afresh at each release, rows shuffled per epoch."""
    rng = np.random.default_rng(seed)
    signal = np.where(labels == 1, 1.0, -1.0)[:, None] * np.ones((1, 4)) * 0.25
    releases = {}
    for epoch in range(epochs):
        order = rng.permutation(len(labels))
        releases[epoch] = (order, signal[order] + rng.normal(size=(len(labels), 4)))
    return releases


class TestAveragingOverEpochs:
    def test_fresh_noise_averages_away(self) -> None:
        labels = _labels()
        releases = _noisy_releases(labels, 30)
        rows, one = releases[0]
        alone = direction_attack(one, labels[rows], 1, seed=0)
        averaged_rows, averaged = epoch_average(releases)
        assert averaged_rows.tolist() == list(range(ROWS))
        assert direction_attack(averaged, labels[averaged_rows], 1, seed=0) > max(0.95, alone + 0.1)

    def test_a_row_missing_from_an_epoch_is_averaged_over_the_others(self) -> None:
        releases = {0: (np.array([0, 1]), np.array([[1.0], [3.0]])), 1: (np.array([1]), np.array([[5.0]]))}
        rows, averaged = epoch_average(releases)
        assert rows.tolist() == [0, 1] and averaged[:, 0].tolist() == [1.0, 4.0]

    def test_random_labels_read_chance(self) -> None:
        rows, averaged = epoch_average(_noisy_releases(_labels(), 30))
        assert abs(direction_attack(averaged, _random_labels()[rows], 1, seed=0) - 0.5) < CHANCE


def _linear(labels: np.ndarray, seed: int = 5) -> np.ndarray:
    """The label in one linear combination of 16 columns, hidden under larger noise in each."""
    rng = np.random.default_rng(seed)
    direction = rng.normal(size=16)
    return rng.normal(size=(len(labels), 16)) * 2.0 + np.outer(np.where(labels == 1, 1.0, -1.0), direction)


class TestLearnedProbe:
    @pytest.mark.parametrize("per_batch", [True, False], ids=["1-per-batch", "10-in-all"])
    def test_a_linear_readout_is_learned_from_a_few_labels(self, per_batch: bool) -> None:
        labels = _labels()
        known = known_rows(labels, _batches() if per_batch else None, 10, seed=0)
        assert probe_attack(_linear(labels), labels, known) > 0.9

    def test_random_labels_read_chance(self) -> None:
        labels = _random_labels()
        known = known_rows(labels, _batches(), 10, seed=0)
        assert abs(probe_attack(_linear(_labels()), labels, known) - 0.5) < CHANCE

    def test_the_known_rows_hold_both_classes(self) -> None:
        """One per batch (10 here) on a 10 % task often holds no positive: one is added, as an attacker would."""
        labels = np.zeros(ROWS, dtype=np.int64)
        labels[5] = 1
        for batches in (_batches(), None):
            known = known_rows(labels, batches, 10, seed=0)
            assert 5 in known and len(known) <= 11


class TestClustering:
    def test_two_directions_split_without_a_single_label(self) -> None:
        labels = _labels()
        rng = np.random.default_rng(6)
        rows = np.where(labels[:, None] == 1, 1.0, -1.0) * np.array([[1.0, 0.5, 0.0]]) + rng.normal(
            scale=0.3, size=(ROWS, 3)
        )
        assert cluster_attack(rows, labels, seed=0) > 0.95

    def test_random_labels_read_chance(self) -> None:
        rows = np.random.default_rng(7).normal(size=(ROWS, 3))
        assert abs(cluster_attack(rows, _labels(), seed=0) - 0.5) < CHANCE


class TestTheStrongest:
    def test_is_the_maximum_of_every_attack(self) -> None:
        labels = _labels()
        figures = label_attacks(_either_sign(labels), labels, _batches(), seed=0)
        assert figures["strongest"] == max(v for k, v in figures.items() if k != "strongest")
        assert figures["strongest"] > 0.9 > figures["direction_k1"]

    def test_random_labels_read_chance_in_every_attack(self) -> None:
        figures = label_attacks(_either_sign(_labels()), _random_labels(), _batches(), seed=0)
        assert all(abs(v - 0.5) < CHANCE for v in figures.values()), figures


def _marvell_defended(
    kind: str, sum_kl: float, batches: int = 20, rows: int = 256, spec: PrivacySpec | None = None
) -> dict[str, float]:
    """Every attack on gradients of ``kind`` after Marvell at ``sum_kl``, 10 % positives, ``batches`` batches.

    ``gaussian``: each class Gaussian with its own mean and the same isotropic spread, the model
    Marvell's optimisation assumes. ``either_sign``: positives along ±u (a random sign each), so
    the two classes share a mean and differ only in their spread along u.
    """
    rng, noise = np.random.default_rng(0), np.random.default_rng(100)
    spec = spec or PrivacySpec(label_defence="marvell", marvell_sum_kl=sum_kl)
    received, labels, batch_of_row = [], [], []
    for b in range(batches):
        y = (rng.random(rows) < 0.1).astype(np.int64)
        y[:2] = (1, 0)
        g = rng.normal(scale=0.3, size=(rows, 8))
        if kind == "gaussian":
            g[:, 0] += np.where(y == 1, 1.0, -0.1)
        else:
            g[:, 0] += np.where(y == 1, 1.5 * rng.choice([-1.0, 1.0], size=rows), 0.0)
        received.append(protect_gradients(spec, torch.from_numpy(g), torch.from_numpy(y), noise).numpy())
        labels.append(y)
        batch_of_row.append(np.full(rows, b))
    return label_attacks(np.concatenate(received), np.concatenate(labels), np.concatenate(batch_of_row), seed=0)


def _bound(sum_kl: float) -> float:
    """The leak AUC sum-KL allows an attacker of one row: 1/2 + TV, TV <= sqrt(sum-KL) / 2 (Pinsker, either way).

    AUC - 1/2 = (P(s(X) > s(Y)) - P(s(Y) > s(X))) / 2 for X of one class and Y of the other, at most
    TV(P1 x P0, P0 x P1) / 2 <= TV(P1, P0); and the smaller of the two KLs is at most sum-KL / 2.
    """
    return 0.5 + math.sqrt(sum_kl) / 2


class TestMarvellsBound:
    """Issue 48: does Marvell's sum-KL bound hold for every attacker? Under its Gaussian model, yes; outside it, no.

    Measured (20 batches of 256): Gaussian classes, strongest 0.580 at sum-KL 0.05 (bound 0.612) and
    0.655 at 0.25 (0.750). Positives along ±u, strongest (the |cos| attack) 0.881 and 0.961: the
    classes' means agree, Marvell summarises each class by its mean and one variance averaged over the
    coordinates, so it sees almost no gap and evens out the averaged variance with isotropic noise,
    which leaves the spread along u that tells the classes apart.
    """

    @pytest.mark.parametrize("sum_kl", [0.05, 0.25])
    def test_gradients_of_its_gaussian_model_stay_under_the_bound(self, sum_kl: float) -> None:
        figures = _marvell_defended("gaussian", sum_kl)
        assert figures["strongest"] <= _bound(sum_kl), figures

    @pytest.mark.parametrize("sum_kl", [0.05, 0.25])
    def test_gradients_outside_it_break_the_bound(self, sum_kl: float) -> None:
        figures = _marvell_defended("either_sign", sum_kl)
        assert figures["abs_direction_k1"] > _bound(sum_kl) + 0.2, figures


class TestMarvellWithEachClassesCovariance:
    """``label_defence = "marvell_full"``: the same sum-KL bound, each class modelled by its whole covariance."""

    @pytest.mark.parametrize("kind", ["gaussian", "either_sign"])
    @pytest.mark.parametrize("sum_kl", [0.05, 0.25])
    def test_every_attack_stays_under_the_bound_on_both_kinds(self, kind: str, sum_kl: float) -> None:
        """Measured: Gaussian 0.565 and 0.632, ±u 0.586 and 0.649 (bounds 0.612 and 0.750)."""
        spec = PrivacySpec(label_defence="marvell_full", marvell_sum_kl=sum_kl)
        figures = _marvell_defended(kind, sum_kl, spec=spec)
        assert figures["strongest"] <= _bound(sum_kl), figures

    def test_the_classes_end_with_one_covariance_and_the_bound_on_their_means(self) -> None:
        rng = np.random.default_rng(3)
        labels = (rng.random(200) < 0.3).astype(np.int64)
        gradients = rng.normal(size=(200, 6)) * np.where(labels[:, None] == 1, [3.0, 1, 1, 1, 1, 0.2], 1.0)
        gradients[:, 1] += labels * 2.0
        noise = full_covariance_noise(gradients, labels, 0.1)
        covariances = [
            np.cov(gradients[labels == c].T, bias=True) + noise.factors[c] @ noise.factors[c].T for c in (0, 1)
        ]
        np.testing.assert_allclose(covariances[0], covariances[1], atol=1e-9)
        gap = gradients[labels == 1].mean(axis=0) - gradients[labels == 0].mean(axis=0)
        common = covariances[0] + noise.along * np.outer(noise.direction, noise.direction)
        assert float(gap @ np.linalg.solve(common, gap)) == pytest.approx(0.1, rel=1e-6)

    def test_a_zero_row_and_a_batch_of_one_class_get_noise(self) -> None:
        """No zero-row tell: the isotropic floor reaches every row; a single-class batch mirrors the absent class."""
        spec = PrivacySpec(label_defence="marvell_full", marvell_sum_kl=0.25)
        gradients = np.random.default_rng(4).normal(size=(8, 4))
        gradients[3] = 0.0
        for labels in (np.array([0, 1, 0, 0, 1, 0, 0, 0]), np.zeros(8, dtype=np.int64)):
            out = protect_gradients(
                spec, torch.from_numpy(gradients), torch.from_numpy(labels), np.random.default_rng(5)
            )
            assert np.all(np.abs(out.numpy()[3]) > 0) and np.isfinite(out.numpy()).all()
