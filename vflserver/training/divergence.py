"""Training that runs away: where it diverged, in words, and the warning of a test loss far past its best.

A NaN or infinite loss, output or weight raises ``TrainingDiverged`` where it is found: the
algorithm's ``record_step`` (the training loss), ``PassiveParties.publish`` (an answer the active
party would send), a passive party before it sends (its report comes back through
``PassiveParties``), ``resume.save_checkpoint`` (weights) and the evaluation (the test loss). The
finder may not know the epoch and batch; ``StepPosition`` does, and ``located`` gives the job's
message its position, the settings to change and the checkpoint that is kept.

With ``[job] validation_fraction`` a divergence after the first best epoch does not fail the
job: the active party ``remember``s the message in its run folder and pauses the job
(``DivergedServingBest``), and the resumed run (at once, or after a restart of the server) finds
it and serves the best epoch instead of training on (``ActiveParty.run``).

Before that, a test loss that grows far past its best is a warning (``TestLossWatch``): the
job's events show it (``vfl-jobs watch``, the console), and the job goes on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from vflalgorithms.divergence import divergence_advice, step_advice
from vflcore.data.checkpoints import atomic_write, checkpoint_positions, pinned
from vflcore.errors import TrainingDiverged
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec

#: A test loss this many times its best so far is a warning...
WARN_RATIO = 10.0
#: ...if it also exceeds the best by this much (a tiny loss that grows tenfold is still tiny).
WARN_MARGIN = 1.0


@dataclass
class StepPosition:
    """Which step of the job the active party is in: where a divergence found inside a step happened."""

    epoch: int = 0  # 0-based, as the loop counts
    first_batch: int = 0  # the epoch's first batch in this run (> 0: resumed inside it)
    steps_before: int = 0  # len(step_losses) when the epoch began

    def start(self, epoch: int, first_batch: int, steps_so_far: int) -> None:
        self.epoch, self.first_batch, self.steps_before = epoch, first_batch, steps_so_far

    def batch(self, steps_so_far: int) -> int:
        """The batch in progress, from 1: each recorded step is one batch of the epoch done."""
        return self.first_batch + (steps_so_far - self.steps_before) + 1


def located(exc: TrainingDiverged, job: JobSpec, epoch: int, batch: int | None, run_dir: Path) -> TrainingDiverged:
    """``exc`` with its position (``epoch`` and ``batch`` from 1, unless it knows its own), the settings
    to change and the active party's newest checkpoint, which the failure keeps."""
    saved = checkpoint_positions(run_dir)
    kept = f"the newest: {saved[-1]}, in {run_dir}" if saved else "none was saved yet"
    best = pinned(run_dir)
    if best is not None and best in saved and best != saved[-1]:  # [job] validation_fraction
        kept += f"; the best by validation, {best}, is kept too"
    if exc.reported:  # a passive party's words, whole: only the active party knows its checkpoints
        return TrainingDiverged(exc.what, message=f"{exc} (the active party's checkpoints: {kept})")
    return exc.located(epoch, batch, divergence_advice(job, kept))


#: In the active party's run folder: the message of a divergence after which the job serves its best epoch.
DIVERGED = "diverged.json"


def best_to_serve(best: Position | None, run_dir: Path) -> Position | None:
    """``best`` if the active party holds its checkpoint pinned (so every party was told to keep it), else None."""
    if best is None or pinned(run_dir) != best or best not in checkpoint_positions(run_dir):
        return None
    return best


def remember(run_dir: Path, diverged: TrainingDiverged) -> None:
    """Note that training diverged: the resumed run serves the best epoch and trains no more."""
    atomic_write(json.dumps({"message": str(diverged)}).encode(), run_dir / DIVERGED)


def remembered(run_dir: Path) -> str | None:
    """The divergence ``remember`` noted in ``run_dir``, or None (none, or a note that does not read)."""
    try:
        message = json.loads((run_dir / DIVERGED).read_text(encoding="utf-8"))["message"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return message if isinstance(message, str) else None


def forget(run_dir: Path) -> None:
    """A fresh start: an earlier run's divergence is not this one's."""
    (run_dir / DIVERGED).unlink(missing_ok=True)


@dataclass
class TestLossWatch:
    """Warns when the test loss grows far past its best: ``WARN_RATIO`` times it, and ``WARN_MARGIN`` above it.

    Once when it first does, then again only each time the loss reaches ``WARN_RATIO`` times the
    loss last warned of, so a loss that keeps growing warns once per order of magnitude, not
    every epoch. A NaN or infinite test loss is not a warning: it fails the job.
    """

    __test__ = False  # not a pytest class, whatever its name

    best: float = math.inf
    best_epoch: int = -1
    warned: float | None = None

    def observe(self, epoch: int, test_loss: float, job: JobSpec) -> str | None:
        """Take epoch ``epoch``'s (0-based) test loss; a warning in words, or None."""
        if not math.isfinite(test_loss):
            return None
        if test_loss < self.best:
            self.best, self.best_epoch = test_loss, epoch
            return None
        floor = max(WARN_RATIO * self.best, self.best + WARN_MARGIN)
        if self.warned is not None:
            floor = max(floor, WARN_RATIO * self.warned)
        if test_loss <= floor:
            return None
        self.warned = test_loss
        return (
            f"the test loss after epoch {epoch + 1} is {test_loss:.4g}, over {WARN_RATIO:g} times its best "
            f"({self.best:.4g}, after epoch {self.best_epoch + 1}): training may be running away; if it goes on "
            f"growing, {step_advice(job)}"
        )
