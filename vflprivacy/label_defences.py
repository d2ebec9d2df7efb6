"""The active party's label defences: what it does to each gradient it returns, and to its labels.

A passive party sees, for every training row, the gradient ∂L/∂h of its embedding. On a binary
task the two classes' gradients point in different directions and, when positives are rare, have
different norms: the direction and norm attacks of Li et al. (ICLR 2022, arXiv 2102.08504)
recover the labels from them alone. The active party applies these defences in its own process,
before an answer leaves, so no other party can turn them off:

- ``marvell``: per batch, zero-mean Gaussian noise whose covariance depends on the row's class,
  chosen with the least total power that bounds the symmetrised KL divergence between the two
  classes' perturbed gradient distributions (the paper's "sumKL") by ``marvell_sum_kl``. The
  paper shows that any attacker's detection error is then at least 1/2 − √sumKL / 4.
- ``max_norm`` (the paper's heuristic baseline): each row gets isotropic Gaussian noise of
  variance (max‖g‖² − ‖g_i‖²) / d per coordinate, so that its expected squared norm is the batch's
  largest: the norm attack sees no difference in expectation.
- ``gaussian``: isotropic noise, each coordinate of standard deviation ``gradient_noise`` × the
  batch's mean per-row gradient norm.
- label differential privacy by randomised response (``label_dp_epsilon``): the active party
  trains the whole job on labels each kept with probability e^ε / (e^ε + K − 1), else replaced by
  one of the K − 1 others at random. The randomised labels are ε-label-DP, and everything
  computed from them (gradients, models, predictions) is post-processing.

Every random draw comes from the generator the caller passes (``vflprivacy.noise``), so the same
place in training draws the same noise in any process, and the draws do not depend on which rows
are of which class: a row's noise is fixed by its position, its class only selects the scale.

No zero-row tell. A saturated output gives rows whose gradient is exactly zero, and they are far
more often of the majority class (issue 38: 1,893 of 2,547 negatives against 17 of 270 positives
late in training). A defence that scales a row (the multiplicative max-norm this module had) or
gives a class no full-rank noise (Marvell's optimum may give one class noise along one direction
only, or none) leaves such a row exactly zero, or exactly on one line, and the passive party reads
the label off it. So every defence adds noise to every row, drawn the same way whatever the row
holds: max-norm and Gaussian are additive and isotropic, and Marvell's noise gets an isotropic
floor common to all rows (``ZERO_ROW_FLOOR``). Noise added alike to both classes can only bring
their distributions closer (data processing), so Marvell's sumKL bound still holds.

No all-zero tell either. A floor relative to the batch alone is zero on a batch whose rows are all
zero (every output saturated: 11 such rows arrived as exact zeros under Marvell, issue 48), and
such batches are mostly of the majority class. So the floor is taken from the larger of the
batch's own mean squared row norm and the job's (``JobPower``: a moving average over the earlier
batches the same party was sent the same tensor of), and every defence adds it, max-norm and
Gaussian too: no batch leaves with exactly the values the model computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from vflcore.errors import ConfigError
from vflcore.job.privacy import MARVELL, PrivacySpec
from vflprivacy.noise import RowNormals

#: Where a defence draws its noise: a keyed generator, or one whose draws keep a share per row all job.
Normals = np.random.Generator | RowNormals

#: What ``_two_classes`` summarises each class's spread as: one variance (Marvell), or a covariance.
Spread = TypeVar("Spread")

#: The zoomed search over the isotropic share: points per round, and rounds (each narrows it 8-fold).
_GRID = 33
_ZOOMS = 6
#: Powers tried at once to bracket the least one (gap × 2^k), and the rounds that narrow the bracket
#: 32-fold: the power found is within 1e-4 of the least one, relatively.
_BRACKET = np.arange(-16, 33)
_REFINES = 3
#: Every defence's floor: isotropic noise on every row whose total power is this fraction of the
#: typical squared row norm (the batch's, or the job's if larger: ``JobPower``), a standard deviation
#: of 10 % of the typical row's norm. It hides a row that is exactly zero among the rows of small
#: norm, at 1 % more noise power.
ZERO_ROW_FLOOR = 0.01
#: The weight ``JobPower`` gives a stream's earlier batches: after an all-zero batch its floor is
#: still 90 % of the one before, and it follows gradients that shrink as training converges.
JOB_POWER_DECAY = 0.9


class JobPower:
    """The typical squared row norm of what the defence perturbed so far in this job, per stream (party, tensor).

    The floor's scale must survive a batch of zeros, so it cannot come from the batch alone; it is
    an exponential moving average of each batch's mean squared row norm, per party and tensor name
    (VIMADMM's λ_B and s^k_B are of different sizes; async answers parties in arrival order, and a
    stream per party keeps each party's floor independent of that order). It is training state:
    the active party's checkpoint holds it (``state``, ``load``), so a resumed job draws what the
    uninterrupted one drew.
    """

    def __init__(self) -> None:
        self.powers: dict[tuple[int, str], float] = {}

    def floor_power(self, stream: tuple[int, str], batch_power: float) -> float:
        """The power the floor of this batch is a fraction of: the larger of the batch's and the stream's average."""
        before = self.powers.get(stream)
        average = batch_power if before is None else JOB_POWER_DECAY * before + (1 - JOB_POWER_DECAY) * batch_power
        self.powers[stream] = average
        return max(batch_power, average)

    def state(self) -> list[tuple[int, str, float]]:
        """The averages as (party, name, power), for a checkpoint (``torch.load(weights_only=True)`` reads them)."""
        return [(party, name, power) for (party, name), power in sorted(self.powers.items())]

    def load(self, state: list[tuple[int, str, float]]) -> None:
        """The averages of ``state`` (from ``state``), replacing these."""
        self.powers = {(int(party), str(name)): float(power) for party, name, power in state}


@dataclass(frozen=True)
class MarvellNoise:
    """The noise Marvell adds to one batch, per class (0: negative, 1: positive).

    ``along`` is the variance along the unit direction of the classes' mean difference, on top of
    the isotropic variance ``iso`` in every coordinate. ``power`` is the expected squared norm of
    the noise added per row, averaged over the batch's classes; ``sum_kl`` before and after.
    """

    direction: np.ndarray
    along: tuple[float, float]
    iso: tuple[float, float]
    power: float
    sum_kl_before: float
    sum_kl_after: float


def _sum_kl(
    iso: np.ndarray, lo: np.ndarray, hi: np.ndarray, var_lo: float, var_hi: float, d: float, gap: float
) -> np.ndarray:
    """Symmetrised KL between two Gaussians, as the paper approximates the classes' perturbed gradients.

    Class "lo" (the one of smaller coordinate variance ``var_lo``) gets total variance ``lo``
    along the mean difference and ``iso`` in each of the d − 1 other directions; class "hi" gets
    ``hi`` along the difference and no isotropic noise. ``gap`` is the squared norm of the
    difference of the two classes' mean gradients.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a, b = iso + var_lo, var_hi
        across = (d - 1) * (a / b + b / a)
        x, y = lo + var_lo, hi + var_hi
        value = 0.5 * (across + (x + gap) / y + (y + gap) / x) - d
    return np.where(np.isfinite(value), value, np.inf)


@dataclass(frozen=True)
class MarvellProblem:
    """One batch's summary, as the paper's optimisation sees it; the class of smaller variance is "lo"."""

    share_lo: float
    var_lo: float
    var_hi: float
    d: int
    gap: float

    def least_sum_kl(self, powers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For each mean noise power, the smallest sumKL it reaches and the (iso, lo, hi) variances that do.

        The paper's optimum puts isotropic noise only on the class of smaller variance (to match
        the other's spread) and spends the rest along the mean difference. For a given isotropic
        share the split along the difference has a closed form: the optimum has (hi + var_hi) /
        (lo + var_lo) = √((C + share_lo·gap) / (C + share_hi·gap)), C the power left plus the
        classes' own variances, clipped to what is feasible (the objective is convex along the
        split). The isotropic share is then found by a grid search that zooms in on its best
        point, for every power at once.
        """
        share_lo, share_hi, d, gap = self.share_lo, 1.0 - self.share_lo, self.d, self.gap
        power = np.asarray(powers, dtype=np.float64)[:, None]
        rows = np.arange(power.shape[0])
        low, high = np.zeros_like(power), np.ones_like(power)
        steps = np.linspace(0.0, 1.0, _GRID)[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            for _ in range(_ZOOMS):
                fraction = low + steps * (high - low)
                iso = fraction * power / (share_lo * d)
                budget = power - share_lo * (d - 1) * iso  # what is left for the direction of the difference
                total = budget + share_lo * self.var_lo + share_hi * self.var_hi
                ratio = np.sqrt((total + share_lo * gap) / (total + share_hi * gap))
                lo = (budget / share_hi + self.var_hi - ratio * self.var_lo) / (ratio + share_lo / share_hi)
                lo = np.clip(lo, iso, np.maximum(budget / share_lo, iso))
                hi = np.maximum(budget - share_lo * lo, 0.0) / share_hi
                values = _sum_kl(iso, lo, hi, self.var_lo, self.var_hi, d, gap)
                best = np.argmin(values, axis=1)
                centre, width = fraction[rows, best][:, None], 2 * (high - low) / (_GRID - 1)
                low, high = np.maximum(centre - width, 0.0), np.minimum(centre + width, 1.0)
        return values[rows, best], iso[rows, best], lo[rows, best], hi[rows, best]

    def least_power(self, sum_kl: float) -> tuple[float, float, float, float, float]:
        """The least mean noise power whose best sumKL is at most ``sum_kl``: (power, sumKL, iso, lo, hi).

        More power never makes the optimum worse, so the least power is bracketed among gap × 2^k,
        and the bracket narrowed 32-fold per round, every candidate of a round solved at once.
        """
        candidates = max(self.gap, 1e-300) * np.power(2.0, _BRACKET)
        values, iso, lo, hi = self.least_sum_kl(candidates)
        meets = np.flatnonzero(values <= sum_kl)
        at = int(meets[0]) if len(meets) else len(candidates) - 1  # out of reach: the largest power tried
        found = (float(candidates[at]), float(values[at]), float(iso[at]), float(lo[at]), float(hi[at]))
        low = float(candidates[at - 1]) if at > 0 else 0.0
        for _ in range(_REFINES if len(meets) else 0):
            candidates = np.linspace(low, found[0], 33)[1:-1]
            values, iso, lo, hi = self.least_sum_kl(candidates)
            meets = np.flatnonzero(values <= sum_kl)
            if len(meets):
                at = int(meets[0])
                found = (float(candidates[at]), float(values[at]), float(iso[at]), float(lo[at]), float(hi[at]))
                low = float(candidates[at - 1]) if at > 0 else low
            else:
                low = float(candidates[-1])
        return found


def marvell_noise(gradients: np.ndarray, labels: np.ndarray, sum_kl: float) -> MarvellNoise:
    """Marvell's noise for one batch: the least power whose sumKL is at most ``sum_kl`` (Li et al. 2022, §4).

    ``gradients`` is (rows, d), ``labels`` holds 0 and 1. The classes are summarised as the paper
    does: each class's mean gradient, its coordinate variance averaged over the d coordinates, and
    the fraction of positive rows. A batch (or a micro-batch part) that holds one class only has
    no contrast to measure; the absent class is then taken as the mirror of the present one (mean
    negated, same spread, half the rows), the contrast a binary cross-entropy gradient has.
    """
    d = np.shape(gradients)[1]
    (mean0, mean1), (var0, var1), p = _two_classes(gradients, labels, lambda rows: float(rows.var(axis=0).mean()))
    difference = mean1 - mean0
    gap = float(difference @ difference)
    # A floor on the variances keeps the KL finite for a class of one row (variance 0).
    floor = 1e-12 * max(gap / d, var0, var1, 1e-30)
    var0, var1 = max(var0, floor), max(var1, floor)
    direction = difference / math.sqrt(gap) if gap > 0 else np.zeros(d)
    lo_class = 0 if var0 <= var1 else 1  # the class of smaller variance gets the isotropic noise
    var_lo, var_hi = (var0, var1) if lo_class == 0 else (var1, var0)
    problem = MarvellProblem(1 - p if lo_class == 0 else p, var_lo, var_hi, d, gap)
    before = float(problem.least_sum_kl(np.zeros(1))[0][0])
    power, after, iso, lo, hi = 0.0, before, 0.0, 0.0, 0.0
    if before > sum_kl:
        power, after, iso, lo, hi = problem.least_power(sum_kl)
    along_lo, along_hi = max(lo - iso, 0.0), hi
    along = (along_lo, along_hi) if lo_class == 0 else (along_hi, along_lo)
    isos = (iso, 0.0) if lo_class == 0 else (0.0, iso)
    return MarvellNoise(direction, along, isos, power, before, after)


def _marvell(gradients: np.ndarray, labels: np.ndarray, sum_kl: float, floor: float, rng: Normals) -> np.ndarray:
    """Each row plus noise of its class's covariance (``marvell_noise``): a scalar along the difference, and iso."""
    noise = marvell_noise(gradients, labels, sum_kl)
    rows, d = gradients.shape
    along_draw = rng.standard_normal(rows)  # drawn for every row, whatever its class
    iso_draw = rng.standard_normal((rows, d))
    positive = np.asarray(labels).reshape(-1) == 1
    along_sd = np.sqrt(np.where(positive, noise.along[1], noise.along[0]))
    iso_sd = np.sqrt(np.where(positive, noise.iso[1], noise.iso[0]) + floor)
    perturbed: np.ndarray = (along_sd * along_draw)[:, None] * noise.direction[None, :] + iso_sd[:, None] * iso_draw
    return perturbed


@dataclass(frozen=True)
class FullCovarianceNoise:
    """``marvell_full``'s noise for one batch: per class, a covariance; for both, a variance along the means' gap.

    Each class's gradients are modelled as a Gaussian with their own mean and whole covariance
    (Marvell summarises the covariance by one variance averaged over the coordinates, and its bound
    then holds for gradients of that shape only: ``tests/unit/vflprivacy/test_stronger_attacks.py``).
    """

    #: (2, d, d): a factor F_y of each class's added covariance (F_y F_y^T), class 0 first.
    factors: np.ndarray
    #: The unit direction of the classes' mean difference, and the common variance added along it.
    direction: np.ndarray
    along: float
    #: The expected squared norm of the noise per row, over the batch's classes.
    power: float


def full_covariance_noise(gradients: np.ndarray, labels: np.ndarray, sum_kl: float) -> FullCovarianceNoise:
    """Noise that makes the two classes' Gaussian models agree in covariance, then bounds their sum-KL by ``sum_kl``.

    1. Covariances: with D = Σ1 − Σ0 = V Λ V^T, class 0 gets V [Λ]+ V^T and class 1 V [−Λ]+ V^T, so
       both become C = Σ0 + [D]+ = Σ1 + [−D]+: no direction is spread more for one class than the other.
    2. Means: two Gaussians of covariance C whose means differ by Δ = |Δ| u have sum-KL Δ^T C^-1 Δ.
       Variance t along u for both classes brings it to |Δ|² q / (1 + t q), q = u^T C^-1 u
       (Sherman-Morrison): t = |Δ|² / sum_kl − 1 / q is the least that meets the bound.

    A batch of one class has no contrast to measure: as ``marvell_noise`` does, the absent class is
    the mirror of the present one (mean negated, same covariance), so only step 2 adds noise.
    """
    d = np.shape(gradients)[1]
    (mean0, mean1), (cov0, cov1), p = _two_classes(gradients, labels, _covariance)
    eigenvalues, vectors = np.linalg.eigh(cov1 - cov0)
    factors = np.stack(
        [vectors * np.sqrt(np.maximum(eigenvalues, 0.0)), vectors * np.sqrt(np.maximum(-eigenvalues, 0.0))]
    )
    common = cov0 + factors[0] @ factors[0].T
    difference = mean1 - mean0
    gap = float(difference @ difference)
    direction, along = np.zeros(d), 0.0
    if gap > 0:
        direction = difference / math.sqrt(gap)
        ridge = 1e-12 * max(float(np.trace(common)) / d, gap / d, 1e-30)  # C may be singular: few rows, wide h^k
        q = float(direction @ np.linalg.solve(common + ridge * np.eye(d), direction))
        along = max(gap / sum_kl - 1.0 / q, 0.0)
    power = along + (1 - p) * float((factors[0] ** 2).sum()) + p * float((factors[1] ** 2).sum())
    return FullCovarianceNoise(factors, direction, along, power)


def _two_classes(
    gradients: np.ndarray, labels: np.ndarray, spread: Callable[[np.ndarray], Spread]
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[Spread, Spread], float]:
    """Each class's mean gradient and ``spread`` (negatives first), and the share of positive rows.

    A batch (or a micro-batch part) that holds one class only has no contrast to measure: the absent
    class is the mirror of the present one (mean negated, same spread, half the rows), the contrast a
    binary cross-entropy gradient has.
    """
    g = np.asarray(gradients, dtype=np.float64)
    y = np.asarray(labels).reshape(-1)
    pos, neg = g[y == 1], g[y == 0]
    if len(pos) and len(neg):
        return (neg.mean(axis=0), pos.mean(axis=0)), (spread(neg), spread(pos)), len(pos) / len(g)
    present = pos if len(pos) else neg
    mean = present.mean(axis=0)
    means = (-mean, mean) if len(pos) else (mean, -mean)
    return means, (spread(present), spread(present)), 0.5


def _covariance(rows: np.ndarray) -> np.ndarray:
    """The rows' covariance (d, d), over the rows themselves (no Bessel term: a class of one row has none)."""
    centred = rows - rows.mean(axis=0)
    covariance: np.ndarray = centred.T @ centred / len(rows)
    return covariance


def _marvell_full(gradients: np.ndarray, labels: np.ndarray, sum_kl: float, floor: float, rng: Normals) -> np.ndarray:
    """Each row plus its class's covariance noise, the common noise along the gap, and Marvell's isotropic floor."""
    noise = full_covariance_noise(gradients, labels, sum_kl)
    rows, d = gradients.shape
    along_draw = rng.standard_normal((rows, 1))  # every draw made for every row, whatever its class
    iso_draw = rng.standard_normal((rows, d))
    class_draw = rng.standard_normal((rows, d))
    positive = np.asarray(labels).reshape(-1) == 1
    shaped = np.einsum("rij,rj->ri", noise.factors[positive.astype(np.int64)], class_draw)
    perturbed: np.ndarray = (
        shaped + math.sqrt(noise.along) * along_draw * noise.direction[None, :] + math.sqrt(floor) * iso_draw
    )
    return perturbed


def row_power(gradients: np.ndarray) -> float:
    """The batch's mean squared row norm: the scale of every defence's floor."""
    return float((gradients**2).sum(axis=1).mean())


def _floor_variance(power: float, width: int) -> float:
    """The isotropic floor, per coordinate, for rows of typical squared norm ``power``: the same for every row."""
    return ZERO_ROW_FLOOR * power / width


def _max_norm(gradients: np.ndarray, rng: Normals) -> np.ndarray:
    """σ_i·z_i, z_i ~ N(0, I_d), σ_i² = (max‖g‖² − ‖g_i‖²) / d: every row's expected squared norm becomes the largest.

    Additive: a row that is exactly zero gets the largest noise, drawn as every row's is. (Scaling
    each row by a random factor, as this defence did before, left zero rows at zero: issue 38.)
    """
    rows, d = gradients.shape
    squared = (gradients**2).sum(axis=1)
    largest = float(squared.max()) if rows else 0.0
    sd = np.sqrt(np.maximum(largest - squared, 0.0) / d)
    noise: np.ndarray = sd[:, None] * rng.standard_normal((rows, d))
    return noise


def _gaussian(gradients: np.ndarray, noise: float, rng: Normals) -> np.ndarray:
    """Isotropic noise: each coordinate's standard deviation is ``noise`` × the batch's mean row norm."""
    scale = noise * float(np.linalg.norm(gradients, axis=1).mean()) if len(gradients) else 0.0
    drawn: np.ndarray = scale * rng.standard_normal(gradients.shape)
    return drawn


def protect_gradients(
    spec: PrivacySpec,
    gradients: torch.Tensor,
    labels: torch.Tensor,
    rng: Normals,
    job: JobPower | None = None,
    stream: tuple[int, str] = (0, ""),
) -> torch.Tensor:
    """``gradients`` (rows, d) as ``spec.label_defence`` perturbs them, with noise from ``rng``.

    ``labels`` are the rows' training labels, in the rows' order (Marvell's noise depends on
    them; the other defences ignore them). ``job`` holds the job's typical row power per
    ``stream`` (party, tensor name), which the floor keeps to on a batch of small or zero rows;
    without it the floor is the batch's own. The result has the input's dtype and device.
    """
    defence = spec.label_defence
    if defence == "none" or gradients.shape[0] == 0:
        return gradients
    g = gradients.detach().to("cpu", torch.float64).numpy().reshape(gradients.shape[0], -1)
    power = row_power(g)
    floor = _floor_variance(power if job is None else job.floor_power(stream, power), g.shape[1])
    if defence in MARVELL:
        y = labels.detach().cpu().numpy().reshape(-1)
        check_binary(y, defence)
        defend = _marvell if defence == "marvell" else _marvell_full
        noise = defend(g, y, spec.marvell_sum_kl, floor, rng)
    elif defence == "max_norm":
        noise = _max_norm(g, rng) + math.sqrt(floor) * rng.standard_normal(g.shape)
    elif defence == "gaussian":
        noise = _gaussian(g, spec.gradient_noise, rng) + math.sqrt(floor) * rng.standard_normal(g.shape)
    else:
        raise ConfigError(f"[privacy] label_defence = {defence!r} is not a defence this party knows")
    out = torch.from_numpy((g + noise).reshape(gradients.shape))
    return out.to(gradients.dtype).to(gradients.device)


def check_binary(labels: np.ndarray, defence: str = "marvell") -> None:
    """Marvell separates two classes; a label other than 0 and 1 means a task it cannot protect."""
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise ConfigError(
            f"[privacy] label_defence = {defence!r} protects binary labels (classes 0 and 1), but these rows have "
            f"{int(np.max(labels)) + 1} classes; use 'max_norm' or 'gaussian', or label_dp_epsilon"
        )


def check_classes(spec: PrivacySpec, classes: int, where: str = "job") -> None:
    """Refuse Marvell on a task of more than two classes, naming the key; the count is the model's output width."""
    if spec.label_defence in MARVELL and classes > 2:
        raise ConfigError(
            f"{where}: [privacy] label_defence = {spec.label_defence!r} protects binary labels, but the labels have "
            f"{classes} "
            "classes; use 'max_norm' or 'gaussian', or protect them with label_dp_epsilon"
        )


# ---- label differential privacy ---------------------------------------------------------------


def keep_probability(epsilon: float, classes: int) -> float:
    """The probability that randomised response keeps a label: e^ε / (e^ε + K − 1), for ε-label-DP."""
    if classes < 2:
        return 1.0
    return 1.0 / (1.0 + (classes - 1) * math.exp(-epsilon))


def randomised_response(labels: torch.Tensor, classes: int, epsilon: float, rng: np.random.Generator) -> torch.Tensor:
    """``labels`` (class ids) each kept with ``keep_probability``, else replaced by one of the others, uniformly.

    Warner's randomised response generalised to K classes: the probability of reporting any
    label given the true one differs by at most e^ε between two true labels, so the released
    labels are ε-differentially private per row. Draws are taken for every row in order, so the
    same generator gives the same labels.
    """
    y = labels.detach().cpu().numpy().astype(np.int64).reshape(-1)
    keep = rng.random(len(y)) < keep_probability(epsilon, classes)
    shift = rng.integers(1, max(classes, 2), size=len(y))  # 1..K-1: a different class, uniformly
    flipped = np.where(keep, y, (y + shift) % max(classes, 1))
    return torch.from_numpy(flipped).reshape(labels.shape).to(labels.device)


__all__ = [
    "JOB_POWER_DECAY",
    "ZERO_ROW_FLOOR",
    "JobPower",
    "MarvellNoise",
    "check_binary",
    "check_classes",
    "keep_probability",
    "marvell_noise",
    "protect_gradients",
    "randomised_response",
    "row_power",
]
