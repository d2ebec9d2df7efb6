"""Figures over seeds: every experiment bench reports a mean ± sample standard deviation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def mean_of(values: Sequence[float]) -> float:
    """The mean of ``mean_std``."""
    return mean_std(values)[0]
