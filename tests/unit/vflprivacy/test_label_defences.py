"""The active party's label defences: each closes the leak it is meant to close, on gradients that leak by design.

The gradients here are built the way a binary cross-entropy makes them on an imbalanced task:
the rare positives' gradients are larger and point the other way. Undefended, the norm and the
direction attack (Li et al., ICLR 2022) recover the labels perfectly; each test measures what a
defence leaves of that, with the same attack code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from vflcore.errors import ConfigError
from vflcore.job.privacy import PrivacySpec
from vflprivacy.attacks import norm_attack
from vflprivacy.label_defences import (
    JOB_POWER_DECAY,
    ZERO_ROW_FLOOR,
    JobPower,
    MarvellProblem,
    check_classes,
    keep_probability,
    marvell_noise,
    protect_gradients,
    randomised_response,
)

ROWS, WIDTH = 512, 8


@pytest.fixture(scope="module")
def leaky() -> tuple[np.ndarray, np.ndarray]:
    """Gradients of an imbalanced batch (10 % positives): positives 10x larger and opposite, plus a little spread."""
    rng = np.random.default_rng(0)
    labels = (rng.random(ROWS) < 0.1).astype(np.int64)
    direction = rng.standard_normal(WIDTH)
    direction /= np.linalg.norm(direction)
    means = np.where(labels[:, None] == 1, -3.0 * direction, 0.3 * direction)
    return means + 0.1 * rng.standard_normal((ROWS, WIDTH)), labels


def norm_auc(gradients: np.ndarray, labels: np.ndarray) -> float:
    """The norm attack: the larger the gradient, the likelier a positive."""
    return float(roc_auc_score(labels, np.linalg.norm(gradients, axis=1)))


def direction_auc(gradients: np.ndarray, labels: np.ndarray) -> float:
    """The direction attack with one known positive: rows ranked by their cosine with it."""
    known = int(np.flatnonzero(labels == 1)[0])
    norms = np.linalg.norm(gradients, axis=1) * np.linalg.norm(gradients[known]) + 1e-30
    cosine = gradients @ gradients[known] / norms
    others = np.arange(len(labels)) != known
    return float(roc_auc_score(labels[others], cosine[others]))


def defended(spec: PrivacySpec, gradients: np.ndarray, labels: np.ndarray, seed: int = 1) -> np.ndarray:
    out = protect_gradients(spec, torch.tensor(gradients, dtype=torch.float32), torch.tensor(labels), rng(seed))
    return out.numpy().astype(np.float64)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


class TestMarvell:
    """Marvell's shaped noise: the least power that bounds the classes' symmetrised KL."""

    def test_undefended_gradients_give_the_labels_away(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """The premise: both attacks are perfect on these gradients."""
        gradients, labels = leaky
        assert norm_auc(gradients, labels) > 0.99
        assert direction_auc(gradients, labels) > 0.99

    def test_a_small_sum_kl_brings_both_attacks_near_chance(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """At sumKL 0.05 the paper's bound leaves any attacker an error of at least 0.44: both AUCs near 0.5."""
        gradients, labels = leaky
        noisy = defended(PrivacySpec(label_defence="marvell", marvell_sum_kl=0.05), gradients, labels)
        assert abs(norm_auc(noisy, labels) - 0.5) < 0.12
        assert abs(direction_auc(noisy, labels) - 0.5) < 0.12

    def test_the_power_is_the_least_that_meets_the_bound(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """The bound holds with equality, and a looser bound needs less noise: the power reported is the noise added."""
        gradients, labels = leaky
        tight, loose = marvell_noise(gradients, labels, 0.05), marvell_noise(gradients, labels, 1.0)
        signal = float((np.linalg.norm(gradients, axis=1) ** 2).mean())
        print(f"signal power {signal:.3f}; noise power, sumKL 0.05: {tight.power:.1f}, 1.0: {loose.power:.1f}")
        assert tight.sum_kl_before > 100 > 1.0 >= loose.sum_kl_after
        assert tight.sum_kl_after == pytest.approx(0.05, rel=1e-3)
        assert 0 < loose.power < tight.power
        noisy = defended(PrivacySpec(label_defence="marvell", marvell_sum_kl=0.05), gradients, labels)
        p = labels.mean()
        expected = p * (tight.along[1] + WIDTH * tight.iso[1]) + (1 - p) * (tight.along[0] + WIDTH * tight.iso[0])
        assert float((np.linalg.norm(noisy - gradients, axis=1) ** 2).mean()) == pytest.approx(expected, rel=0.2)
        assert tight.power == pytest.approx(expected, rel=1e-6)

    def test_gradients_that_do_not_leak_get_only_the_floor(self) -> None:
        """Two classes already within the bound (same distribution) get the zero-row floor alone: 1 % of their power."""
        gradients = np.random.default_rng(5).standard_normal((2000, WIDTH))
        labels = np.arange(2000) % 2
        spec = PrivacySpec(label_defence="marvell", marvell_sum_kl=0.25)
        assert marvell_noise(gradients, labels, 0.25).power == 0
        noise = defended(spec, gradients, labels) - gradients
        signal = float((gradients**2).sum(axis=1).mean())
        assert float((noise**2).sum(axis=1).mean()) == pytest.approx(ZERO_ROW_FLOOR * signal, rel=0.1)

    def test_a_part_with_one_class_still_gets_noise(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """A micro-batch of negatives only: the absent class is taken as the mirror, and noise is still added."""
        gradients, labels = leaky
        negatives = gradients[labels == 0][:32]
        noisy = defended(PrivacySpec(label_defence="marvell"), negatives, np.zeros(32, dtype=np.int64))
        assert np.linalg.norm(noisy - negatives) > np.linalg.norm(negatives)

    def test_the_same_generator_gives_the_same_noise(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """Noise comes only from the generator passed: a resumed run that passes the same one sends the same bytes."""
        gradients, labels = leaky
        spec = PrivacySpec(label_defence="marvell")
        np.testing.assert_array_equal(defended(spec, gradients, labels, 7), defended(spec, gradients, labels, 7))
        assert not np.array_equal(defended(spec, gradients, labels, 7), defended(spec, gradients, labels, 8))

    @pytest.mark.parametrize("marvell", ["marvell", "marvell_full"])
    def test_more_than_two_classes_is_refused_by_key(self, leaky: tuple[np.ndarray, np.ndarray], marvell: str) -> None:
        """Marvell separates two classes: labels of a third class, or a 3-class model, name the key."""
        gradients, labels = leaky
        with pytest.raises(ConfigError, match=rf"\[privacy\] label_defence = '{marvell}'"):
            defended(PrivacySpec(label_defence=marvell), gradients, labels * 2)
        with pytest.raises(ConfigError, match=rf"\[privacy\] label_defence = '{marvell}'.*3 classes"):
            check_classes(PrivacySpec(label_defence=marvell), 3)
        check_classes(PrivacySpec(label_defence="max_norm"), 3)
        check_classes(PrivacySpec(label_defence=marvell), 2)


class TestHeuristics:
    """The paper's max-norm baseline and isotropic Gaussian noise."""

    def test_max_norm_removes_the_norm_signal(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """Each row gets isotropic noise up to the largest expected squared norm: the norm attack weakens."""
        gradients, labels = leaky
        noisy = defended(PrivacySpec(label_defence="max_norm"), gradients, labels)
        assert norm_auc(noisy, labels) < 0.75
        largest = float(np.linalg.norm(gradients, axis=1).max())
        negatives = np.linalg.norm(noisy[labels == 0], axis=1) ** 2
        assert float(negatives.mean()) == pytest.approx(largest**2, rel=0.25)  # expected squared norm: the largest

    def test_gaussian_noise_has_the_stated_scale(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """Each coordinate's noise has standard deviation ``gradient_noise`` × the batch's mean row norm."""
        gradients, labels = leaky
        noise = defended(PrivacySpec(label_defence="gaussian", gradient_noise=2.0), gradients, labels) - gradients
        scale = 2.0 * float(np.linalg.norm(gradients, axis=1).mean())
        assert float(noise.std()) == pytest.approx(scale, rel=0.05)
        strong = defended(PrivacySpec(label_defence="gaussian", gradient_noise=5.0), gradients, labels)
        assert norm_auc(strong, labels) < 0.7

    def test_none_returns_the_gradients_untouched(self, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        gradients, labels = leaky
        tensor = torch.tensor(gradients, dtype=torch.float32)
        assert protect_gradients(PrivacySpec(), tensor, torch.tensor(labels), rng(0)) is tensor


#: Every gradient defence, at a setting strong enough that the norm attack should be near chance.
STRONG = {
    "marvell": PrivacySpec(label_defence="marvell", marvell_sum_kl=0.05),
    "marvell_full": PrivacySpec(label_defence="marvell_full", marvell_sum_kl=0.05),
    "max_norm": PrivacySpec(label_defence="max_norm"),
    "gaussian": PrivacySpec(label_defence="gaussian", gradient_noise=20.0),
}


class TestNoZeroRowTell:
    """Issue 38: a row whose gradient is exactly zero (a saturated output) must not be told apart by being zero.

    A defence that scales rows (the multiplicative max-norm this project had) left those rows at
    zero: the norm attack then read the label off them. Both tests fail on that max-norm.
    """

    @pytest.mark.parametrize("defence", sorted(STRONG))
    def test_a_class_of_zero_gradients_gives_the_norm_attack_chance(
        self, defence: str, leaky: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """Every negative (the majority) exactly zero: undefended the norm attack is perfect; defended, near 0.5."""
        gradients, labels = leaky
        gradients = np.where(labels[:, None] == 1, gradients, 0.0)
        assert norm_attack(gradients, labels) == 1.0
        aucs = [norm_attack(defended(STRONG[defence], gradients, labels, seed), labels) for seed in range(5)]
        print(f"{defence}: norm attack AUC over 5 draws {np.round(aucs, 3).tolist()}")
        assert float(np.mean(aucs)) < 0.6, aucs

    @pytest.mark.parametrize("defence", sorted(STRONG))
    def test_zero_rows_get_full_rank_noise_at_the_default_setting(
        self, defence: str, leaky: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """Zero rows among ordinary ones: none stays zero, and their noise spans every direction (not one line)."""
        gradients, labels = leaky
        zero = np.arange(ROWS) % 4 == 0  # a quarter of the rows, of both classes
        gradients = np.where(zero[:, None], 0.0, gradients)
        spec = PrivacySpec(label_defence=defence)
        noisy = defended(spec, gradients, labels)
        assert np.linalg.norm(noisy[zero], axis=1).min() > 0
        assert np.linalg.matrix_rank(noisy[zero & (labels == 0)]) == WIDTH
        assert np.linalg.matrix_rank(noisy[zero & (labels == 1)]) == min(WIDTH, int((zero & (labels == 1)).sum()))


class TestAllZeroBatch:
    """Issue 48: a batch whose rows are all exactly zero (every output saturated) arrived as exact zeros.

    A floor relative to the batch is zero there. With the job's typical row power (``JobPower``)
    it is not: the batch gets the floor of the batches before it, under every defence.
    """

    @pytest.mark.parametrize("defence", ["marvell", "marvell_full", "max_norm", "gaussian"])
    def test_an_all_zero_batch_gets_noise(self, defence: str, leaky: tuple[np.ndarray, np.ndarray]) -> None:
        """After one ordinary batch, 11 zero rows leave with isotropic noise of the job's floor, full rank."""
        gradients, labels = leaky
        spec, job, stream = PrivacySpec(label_defence=defence), JobPower(), (2, "gradient")
        protect_gradients(spec, torch.tensor(gradients), torch.tensor(labels), rng(0), job, stream)
        zeros, zero_labels = torch.zeros((11, WIDTH), dtype=torch.float64), torch.tensor(labels[:11])
        alone = protect_gradients(spec, zeros, zero_labels, rng(1))
        assert not alone.any(), "without the job's power the floor of an all-zero batch is zero"
        noisy = protect_gradients(spec, zeros, zero_labels, rng(1), job, stream).numpy()
        assert np.linalg.norm(noisy, axis=1).min() > 0
        assert np.linalg.matrix_rank(noisy) == WIDTH
        floor = ZERO_ROW_FLOOR * JOB_POWER_DECAY * float((gradients**2).sum(axis=1).mean())
        assert job.powers[stream] == pytest.approx(JOB_POWER_DECAY * float((gradients**2).sum(axis=1).mean()))
        assert float((noisy**2).sum(axis=1).mean()) == pytest.approx(floor, rel=0.6)  # 11 rows: a rough power

    def test_the_job_power_follows_each_stream_and_survives_a_checkpoint(self) -> None:
        """A moving average per (party, tensor); its state reads back equal; a new stream starts at its batch."""
        job = JobPower()
        assert job.floor_power((2, "gradient"), 4.0) == 4.0
        assert job.floor_power((2, "gradient"), 0.0) == pytest.approx(JOB_POWER_DECAY * 4.0)
        assert job.floor_power((3, "gradient"), 1.0) == 1.0
        assert job.floor_power((2, "gradient"), 100.0) == 100.0  # a batch above the average keeps its own
        again = JobPower()
        again.load(job.state())
        assert again.powers == job.powers


class TestRandomisedResponse:
    """Label DP: each label kept with probability e^ε / (e^ε + K − 1), else one of the others."""

    @pytest.mark.parametrize(("epsilon", "classes"), [(1.0, 2), (0.5, 2), (2.0, 10), (0.0, 3)])
    def test_keep_probability_is_the_formula(self, epsilon: float, classes: int) -> None:
        expected = math.exp(epsilon) / (math.exp(epsilon) + classes - 1)
        assert keep_probability(epsilon, classes) == pytest.approx(expected, rel=1e-12)

    @pytest.mark.parametrize(("epsilon", "classes"), [(1.0, 2), (2.0, 10)])
    def test_labels_are_kept_at_the_stated_rate_and_flipped_uniformly(self, epsilon: float, classes: int) -> None:
        """A binomial check, 5 standard deviations wide; a changed label is any other class, never the same."""
        n = 20_000
        labels = torch.from_numpy(np.random.default_rng(1).integers(0, classes, n))
        noisy = randomised_response(labels, classes, epsilon, rng(2))
        p = keep_probability(epsilon, classes)
        kept = int((noisy == labels).sum())
        assert abs(kept - n * p) < 5 * math.sqrt(n * p * (1 - p))
        assert noisy.dtype == labels.dtype and int(noisy.min()) >= 0 and int(noisy.max()) < classes
        if classes > 2:
            changed = (noisy - labels)[noisy != labels] % classes
            counts = np.bincount(changed.numpy(), minlength=classes)[1:]
            assert counts.min() > 0.8 * counts.mean()

    def test_the_same_generator_gives_the_same_labels(self) -> None:
        """A resumed job re-draws its labels from the same key, and trains on the same ones."""
        labels = torch.from_numpy(np.random.default_rng(1).integers(0, 2, 500))
        assert torch.equal(randomised_response(labels, 2, 1.0, rng(3)), randomised_response(labels, 2, 1.0, rng(3)))


class TestMarvellSolver:
    """The optimisation itself, against a brute-force search of the paper's general problem."""

    @pytest.mark.parametrize("seed", range(4))
    def test_no_split_of_the_power_does_better(self, seed: int) -> None:
        """200k random splits of the same power over all four variances (isotropic noise on both classes
        allowed) never reach a lower sumKL than the solver's, which puts it on one class only."""
        draw = np.random.default_rng(seed)
        d, p, gap, power = int(draw.integers(2, 10)), float(draw.uniform(0.05, 0.95)), 5.0, float(draw.uniform(1, 30))
        var0, var1 = (float(v) for v in draw.uniform(0.05, 2.0, 2))
        lo_class = 0 if var0 <= var1 else 1
        share_lo = 1 - p if lo_class == 0 else p
        low, high = (var0, var1) if lo_class == 0 else (var1, var0)
        solved = float(MarvellProblem(share_lo, low, high, d, gap).least_sum_kl(np.array([power]))[0][0])
        # Shares of the power: negatives along the difference, negatives isotropic, the same for positives.
        w = draw.dirichlet(np.ones(4), size=200_000)
        iso0, iso1 = w[:, 1] * power / ((1 - p) * d), w[:, 3] * power / (p * d)
        along0, along1 = w[:, 0] * power / (1 - p) + iso0, w[:, 2] * power / p + iso1
        brute = (
            0.5
            * (
                (d - 1) * ((iso0 + var0) / (iso1 + var1) + (iso1 + var1) / (iso0 + var0))
                + (along0 + var0 + gap) / (along1 + var1)
                + (along1 + var1 + gap) / (along0 + var0)
            )
            - d
        )
        assert solved <= float(brute.min()) + 1e-9
        assert solved == pytest.approx(float(brute.min()), rel=0.05)
