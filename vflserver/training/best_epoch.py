"""Which epoch's model is served: the best by the validation loss, and when to stop looking.

With ``[job] validation_fraction`` every epoch is also scored on rows set aside from training
(``Schedule.valid_rows``). The epoch with the lowest validation loss is the best so far; every
party pins its checkpoint (``Checkpoint.best``), so it outlives ``keep_checkpoints``. With
``[job] patience`` the job stops once that many epochs in a row found nothing better. At the
end every party loads the best epoch's checkpoint (``Restore(serve=True)``) and that is what is
exported, scored on the test rows and served; ``summary.json`` names it (``best_epoch``).

The test rows never choose anything: choosing on them would make their score optimistic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflserver.training.reports import EpochReport


@dataclass
class BestEpoch:
    """The best epoch so far by validation loss, and whether ``patience`` says to stop."""

    patience: int
    best: EpochReport | None = None

    @classmethod
    def of(cls, job: JobSpec, reports: Iterable[EpochReport] = ()) -> BestEpoch | None:
        """The tracker of a job with validation rows (None: without), fed a resumed job's epochs so far."""
        if not job.serves_best_epoch:
            return None
        tracker = cls(job.patience)
        for report in reports:
            tracker.observe(report)
        return tracker

    def observe(self, report: EpochReport) -> bool:
        """Take one epoch's report; whether it is the new best. A tie keeps the earlier epoch."""
        loss = report.valid_loss
        if loss is None or not math.isfinite(loss):
            return False
        if self.best is None or loss < (self.best.valid_loss or math.inf):
            self.best = report
            return True
        return False

    @property
    def position(self) -> Position | None:
        """The checkpoint of the best epoch: its end."""
        return None if self.best is None else Position.after_epoch(self.best.epoch)

    def should_stop(self, epoch: int) -> bool:
        """Whether training stops after ``epoch`` (0-based): ``patience`` epochs since the best."""
        return bool(self.patience) and self.best is not None and epoch - self.best.epoch >= self.patience
