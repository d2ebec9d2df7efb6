"""The job: the settings every party of one training run must share.

The server's config decides them; a passive party learns them when it joins. Keeping them in
one frozen dataclass means the schedule (row split, batches, model seeds) is derived from the
same numbers on every party, so no party has to tell another which rows it is working on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflcore.options import algorithm_options
from vflcore.sampler import epoch_batches, split_rows

TASKS = ("classification", "regression")

#: The active party (labels, server) is party 1; passive parties are 2, 3, ...
ACTIVE_PARTY = 1


@dataclass(frozen=True)
class JobSpec:
    """Settings shared by every party of a job."""

    job_id: str
    algorithm: str = "splitnn"
    task: str = "classification"
    seed: int = 0
    batch_size: int = 64
    epochs: int = 10
    embedding_dim: int = 16
    bottom_hidden: tuple[int, ...] = (64,)
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    #: The L2 penalty every party's optimizer adds to its gradients (0: none).
    weight_decay: float = 0.0
    test_fraction: float = 0.2
    num_rows: int = 0
    passive_parties: tuple[int, ...] = (2, 3)
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    #: The model's output width (classes, or 1 for regression); the active party sets it from its
    #: label column, for algorithms whose passive parties hold a head of their own (VIMADMM-J).
    num_outputs: int = 0

    def options_json(self) -> str:
        """Algorithm options as JSON: the only encoding that crosses the wire."""
        return json.dumps(self.algorithm_options, sort_keys=True)

    def option(self, name: str) -> Any:
        """One of the algorithm's settings (``vflcore.options``), its default if the config omits it."""
        return algorithm_options(self.algorithm, self.algorithm_options)[name]

    def schedule(self) -> Schedule:
        """The row split and batch order, derived from the seed alone."""
        return Schedule(self)


def model_seed(job_seed: int, party: int, part: str) -> int:
    """Seed of one model part of one party: distinct per part, equal across runs and processes."""
    offsets = {"bottom": 0, "top": 1, "head": 2, "dropout": 3}
    return int(job_seed) * 1009 + party * 17 + offsets[part]


class Schedule:
    """Which aligned rows are held out, and the batches of every epoch."""

    def __init__(self, job: JobSpec) -> None:
        self.job = job
        self.train_rows, self.test_rows = split_rows(job.num_rows, job.test_fraction, job.seed)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The batches of one epoch, identical on every party."""
        return epoch_batches(self.train_rows, self.job.batch_size, self.job.seed, epoch)


def epoch_mean(
    batches: Iterable[np.ndarray], step: Callable[[np.ndarray], float], losses: list[float] | None = None
) -> float:
    """Run ``step`` on each batch of rows, append each loss to ``losses``; the row-weighted mean loss.

    The loop every algorithm's epoch shares, in the daemons and in the in-process references.
    """
    total, count = 0.0, 0
    for rows in batches:
        value = step(rows)
        if losses is not None:
            losses.append(value)
        total, count = total + value * len(rows), count + len(rows)
    return total / max(1, count)
