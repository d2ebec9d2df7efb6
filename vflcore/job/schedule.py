"""The job's schedule: which rows train, which test and validate, the batches of each epoch, and where training is.

Parties hold the same aligned rows in the same order and the same job seed, so seeding NumPy's
generator with the seed (and epoch) gives each party the same split and the same batches. Nothing
depends on process state, which is what makes the agreement hold across machines. The one
exception is a test set the active party's dataset names (``held_out_ids``): it tells the passive
parties those rows' positions (``HoldOut``), and the rest follows from the seed again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from vflcore.job.spec import JobSpec


class Position(NamedTuple):
    """Where training continues: the next step is batch ``batch`` of epoch ``epoch`` (both from 0).

    A checkpoint is named by the position it resumes at. The end of epoch e is ``Position(e + 1, 0)``
    (``after_epoch``); a checkpoint taken after s batches of epoch e is ``Position(e, s)``; a job
    that starts afresh starts at ``Position(0, 0)``. Positions compare in training order.
    """

    epoch: int
    batch: int = 0

    @classmethod
    def after_epoch(cls, epoch: int) -> Position:
        return cls(epoch + 1, 0)

    def __str__(self) -> str:
        """Counted from 1, as users read epochs: "the end of epoch 3", "epoch 4 after 20 batches"."""
        if self.batch == 0:
            return "the start" if self.epoch == 0 else f"the end of epoch {self.epoch}"
        return f"epoch {self.epoch + 1} after {self.batch} batches"


def mid_epoch_checkpoint_due(job: JobSpec, epoch: int, done: int, per_epoch: int) -> bool:
    """Whether ``done`` batches into ``epoch`` is a ``checkpoint_every_steps`` boundary inside the epoch.

    Every party asks the same question after the same step, so all of them save the same
    positions without telling each other; the epoch's end is saved anyway, so it is not due here.
    """
    return _due_inside(job.checkpoint_every_steps, epoch, done, per_epoch)


def round_score_due(job: JobSpec, epoch: int, done: int, per_epoch: int) -> bool:
    """Whether ``done`` batches into ``epoch`` is an ``eval_every_rounds`` boundary inside the epoch.

    As with the checkpoints, every party asks after the same step: each passive party then sends
    its representation of the test rows, and the active party scores them. The epoch's end is
    scored anyway, so it is not due here.
    """
    return _due_inside(job.eval_every_rounds, epoch, done, per_epoch)


def _due_inside(every: int, epoch: int, done: int, per_epoch: int) -> bool:
    """Whether the job's step count after ``done`` batches of ``epoch`` is a multiple of ``every``, inside the epoch."""
    return every > 0 and 0 < done < per_epoch and (epoch * per_epoch + done) % every == 0


def model_seed(job_seed: int, party: int, part: str) -> int:
    """Seed of one model part of one party: distinct per part, equal across runs and processes."""
    offsets = {"bottom": 0, "top": 1, "head": 2, "dropout": 3, "student": 4}
    return int(job_seed) * 1009 + party * 17 + offsets[part]


class Schedule:
    """Which aligned rows train, which are held out to test and to validate, and the batches of every epoch.

    The test rows are the job's seeded ``test_fraction``, or the rows the active party's dataset
    names (``held_out``: its ``held_out_ids`` file, sent to every party as ``HoldOut``). The
    validation rows are a seeded ``validation_fraction`` of the rest; they never train.
    """

    def __init__(self, job: JobSpec, held_out: np.ndarray | None = None) -> None:
        self.job = job
        if held_out is None:
            train_rows, self.test_rows = split_rows(job.num_rows, job.test_fraction, job.seed)
        else:
            train_rows, self.test_rows = rows_around(job.num_rows, held_out)
        self.train_rows, self.valid_rows = validation_rows(train_rows, job.validation_fraction, job.seed)
        #: Whether the test rows were given (``held_out``) rather than drawn by the seed.
        self.given = held_out is not None

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


def split_rows(num_rows: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split row indices into (train_rows, test_rows), each sorted ascending, as int64 arrays.

    The test rows are the first round(num_rows * test_fraction) entries of a seeded permutation;
    sorting each part keeps row access in file order, which is cheaper and easier to inspect.
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be at least 1, got {num_rows}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    num_test = round(num_rows * test_fraction)
    if num_rows - num_test < 1:
        raise ValueError(
            f"test_fraction {test_fraction} leaves no training rows out of {num_rows}; lower test_fraction"
        )
    permutation = np.random.default_rng(seed).permutation(num_rows).astype(np.int64)
    test_rows = np.sort(permutation[:num_test])
    train_rows = np.sort(permutation[num_test:])
    return train_rows, test_rows


def rows_around(num_rows: int, held_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(train_rows, test_rows) when the test rows are given: ``held_out``, and every other row trains."""
    test_rows = np.unique(np.asarray(held_out, dtype=np.int64))
    if len(test_rows) and (test_rows[0] < 0 or test_rows[-1] >= num_rows):
        raise ValueError(f"held-out rows must be positions among the {num_rows} aligned rows")
    if len(test_rows) >= num_rows:
        raise ValueError(f"all {num_rows} aligned rows are held out, none is left to train on")
    mask = np.ones(num_rows, dtype=bool)
    mask[test_rows] = False
    return np.flatnonzero(mask).astype(np.int64), test_rows


def validation_rows(train_rows: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_rows, valid_rows): a seeded ``fraction`` of ``train_rows`` set aside, each part sorted.

    At least one row when ``fraction`` > 0, and at least one row left to train on. Seeded apart
    from the test split ([seed, 1]), so a job's test rows stay the same with or without validation.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return train_rows, np.empty(0, dtype=np.int64)
    count = max(1, round(len(train_rows) * fraction))
    if len(train_rows) - count < 1:
        raise ValueError(f"validation_fraction {fraction} leaves no training rows out of {len(train_rows)}; lower it")
    permutation = np.random.default_rng([seed, 1]).permutation(len(train_rows))
    valid = np.sort(train_rows[permutation[:count]])
    train = np.sort(train_rows[permutation[count:]])
    return train, valid


def epoch_batches(train_rows: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Shuffle train_rows for this epoch and cut them into batches; the last batch may be smaller.

    Seeding with [seed, epoch] gives each epoch its own order that any party can recompute
    independently, e.g. after a restart, without replaying earlier epochs.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if epoch < 0:
        raise ValueError(f"epoch must be non-negative, got {epoch}")
    shuffled = np.random.default_rng([seed, epoch]).permutation(np.asarray(train_rows, dtype=np.int64))
    return [shuffled[start : start + batch_size] for start in range(0, len(shuffled), batch_size)]
