"""The privacy bench's figures over seeds: each cell (task, algorithm, setting) as a mean and a 95 % interval.

Why seeds. A defence's noise comes from a secret key drawn fresh for every job, and the job's seed
decides the model's first weights and the train/test split. One setting cost −0.039 of test ROC AUC
in one run and −0.011 in its repeat (issue 38): a spread larger than the 0.01 bound the bench
judges. So every cell runs several seeds (``bench.privacy.plan.SEEDS``), and each figure is given as its
mean and a 95 % confidence interval (Student's t over the seeds).

The utility cost is paired: each defended run against the undefended run of the same task,
algorithm and seed (same first weights, same split), so the seed's own effect on utility drops
out of the difference. Negative is a loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from bench.privacy.runs import ATTACKS, NAN, Outcome

UNDEFENDED = "none"
#: The label attacks a cell is judged by: above all the strongest attacker's figure over the whole run
#: (issue 48: the maximum over every attack of ``vflprivacy.attacks.label_attacks``, on each epoch's
#: rows and on rows averaged over epochs), then the norm and direction (k = 1) attacks on the last
#: epoch's answers, which it bounds; for VIMADMM and VIMADMM-J the same on the residual s^k_B it also
#: receives (NaN, so left out, for the other algorithms).
LABEL_ATTACKS = (
    "strongest_auc_run",
    "norm_auc",
    "direction_auc_k1",
    "residual_strongest_auc_run",
    "residual_norm_auc",
    "residual_direction_auc_k1",
)
#: Every attack figure a cell summarises: the table's, and the residual's.
CELL_ATTACKS = (*ATTACKS, "residual_norm_auc", "residual_direction_auc_k1", "residual_strongest_auc_run")


@dataclass(frozen=True)
class Estimate:
    """A figure over seeds: the mean and a 95 % confidence interval (NaN with fewer than two values)."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Estimate:
        """From the finite values (a NaN is a figure that does not apply or was not produced)."""
        finite = [float(v) for v in values if math.isfinite(v)]
        if not finite:
            return cls(NAN, NAN, NAN, 0)
        mean = float(np.mean(finite))
        if len(finite) < 2:
            return cls(mean, NAN, NAN, 1)
        half = float(stats.t.ppf(0.975, len(finite) - 1) * np.std(finite, ddof=1) / math.sqrt(len(finite)))
        return cls(mean, mean - half, mean + half, len(finite))

    def text(self) -> str:
        """``0.512 [0.480, 0.544]``; the mean alone from one value; ``-`` from none."""
        if math.isnan(self.mean):
            return "-"
        if math.isnan(self.low):
            return f"{self.mean:.3f}"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class Cell:
    """One task × algorithm × setting over its seeds."""

    task: str
    algorithm: str
    setting: str
    outcomes: tuple[Outcome, ...]
    utility: Estimate
    #: Paired with the undefended run of the same seed: defended utility minus undefended.
    cost: Estimate
    attacks: dict[str, Estimate]
    label_epsilon: Estimate
    embedding_epsilon: Estimate

    @property
    def finished(self) -> bool:
        return any(o.finished for o in self.outcomes)

    @property
    def seeds(self) -> int:
        return sum(o.finished for o in self.outcomes)

    @property
    def label_attack(self) -> float:
        """The target's figure: the largest mean among ``LABEL_ATTACKS`` that apply (NaN if none does)."""
        means = [self.attacks[k].mean for k in LABEL_ATTACKS if not math.isnan(self.attacks[k].mean)]
        return max(means) if means else NAN

    @property
    def why_not(self) -> str:
        """Why no run of the cell finished (a refusal's message, a failure's state), or ""."""
        if self.finished or not self.outcomes:
            return ""
        first = self.outcomes[0]
        return f"{first.state}: {first.message}"


def cells(outcomes: Sequence[Outcome]) -> list[Cell]:
    """The outcomes grouped into cells, in the order their first runs appear, each cost paired by seed."""
    undefended = {
        (o.run.task, o.run.algorithm, o.run.seed): o.utility
        for o in outcomes
        if o.run.setting == UNDEFENDED and o.finished
    }
    groups: dict[tuple[str, str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.run.task, o.run.algorithm, o.run.setting), []).append(o)
    found = []
    for (task, algorithm, setting), runs in groups.items():
        done = [o for o in runs if o.finished]
        costs = [o.utility - undefended.get((task, algorithm, o.run.seed), NAN) for o in done]
        found.append(
            Cell(
                task,
                algorithm,
                setting,
                tuple(runs),
                utility=Estimate.of(o.utility for o in done),
                cost=Estimate.of(costs),
                attacks={k: Estimate.of(o.attack(k) for o in done) for k in CELL_ATTACKS},
                label_epsilon=Estimate.of(o.label_epsilon for o in done),
                embedding_epsilon=Estimate.of(o.embedding_epsilon for o in done),
            )
        )
    return found


__all__ = ["CELL_ATTACKS", "LABEL_ATTACKS", "UNDEFENDED", "Cell", "Estimate", "cells"]
