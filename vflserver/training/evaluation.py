"""Scoring the model on rows that never train: the test rows after each epoch and inside it, the validation rows.

After each epoch the active party scores the held-out test rows (``after_epoch``) and, with
``[job] validation_fraction``, the validation rows (``validation``), which choose the served epoch
(``best_epoch``). With ``[job] eval_every_rounds`` it also scores the test rows inside the epoch,
after every N training steps (``score_round``), so a curve of accuracy against rounds is
measured by the round, as the papers' authors plot theirs.

Inside an epoch no Evaluate task can reach a passive party: it is busy training. So each party
sends its representation of the test rows by itself, right after the same steps
(``vflcore.job.schedule.round_score_due``), as it saves its checkpoints inside an epoch, and this party
announces those uploads before the epoch starts (``expect_rounds``). Scoring changes no model:
the modes each model trains in are put back (``vflcore.ml.modes``), and no random draw is taken.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import structlog
import torch

from vflalgorithms.halves import ServerAlgorithm
from vflcore.errors import check_finite
from vflcore.job.schedule import Schedule, round_score_due
from vflcore.job.spec import JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.metrics import task_metrics
from vflcore.ml.modes import modes_kept
from vflcore.wire.names import EVAL_EMBEDDING
from vflcore.work_items import Evaluate
from vflserver.federation.passive_parties import PassiveParties
from vflserver.training.aligned_predictions import in_blocks
from vflserver.training.reports import RoundScore, write_predictions

log = structlog.get_logger(__name__)


class Evaluation:
    """The active party's scores of one job's model on its test and validation rows."""

    def __init__(
        self,
        job: JobSpec,
        schedule: Schedule,
        parties: PassiveParties,
        algorithm: ServerAlgorithm,
        labels: torch.Tensor,
    ) -> None:
        self.job, self.schedule, self.parties, self.algorithm, self.labels = job, schedule, parties, algorithm, labels
        self._loss_fn = task_loss(job.task)
        #: The test scores taken inside the epoch in progress (``eval_every_rounds``).
        self.rounds: list[RoundScore] = []

    def after_epoch(
        self, epoch: int, rows: np.ndarray | None = None, *, what: str = "the test loss after the epoch"
    ) -> tuple[float, dict[str, float]]:
        """Loss and task metrics on the test rows (or ``rows``), with every party's current model."""
        rows = self.schedule.test_rows if rows is None else rows
        if len(rows) == 0:
            return float("nan"), {}
        output = torch.cat(in_blocks(rows, lambda block: self._block(epoch, block)))
        loss = float(self._loss_fn(output, self.labels[rows]))
        # The model ran away: its outputs are not worth a checkpoint.
        check_finite(loss, what, epoch=epoch + 1)
        return loss, task_metrics(self.job.task, self.label_array(rows), output.numpy())

    def validation(self, epoch: int) -> tuple[float | None, dict[str, float]]:
        """Loss and metrics on the validation rows (``[job] validation_fraction``); (None, {}) without them."""
        if not len(self.schedule.valid_rows):
            return None, {}
        return self.after_epoch(epoch, self.schedule.valid_rows, what="the validation loss after the epoch")

    def _block(self, epoch: int, rows: np.ndarray) -> torch.Tensor:
        """The model's output on some rows; one block at a time, so that no party embeds 2M rows at once."""
        if not self.algorithm.needs_parties_to_predict:
            return self.algorithm.predict(rows, {})
        fed = self.parties
        fed.expect(EVAL_EMBEDDING, epoch, 0, (len(rows), self.algorithm.upload_width))
        fed.dispatch(lambda tid: Evaluate(tid, epoch, rows))
        return self.algorithm.predict(rows, fed.gather(EVAL_EMBEDDING, epoch, 0))

    def expect_rounds(self, epoch: int, first_batch: int) -> None:
        """Announce the test rows' representations each party sends inside ``epoch`` (``eval_every_rounds``).

        Before the epoch starts: a party sends them right after its step, which may be before
        this party has finished the same step.
        """
        self.rounds = []
        if not self.job.eval_every_rounds or not self.algorithm.needs_parties_to_predict:
            return
        per_epoch = len(self.schedule.batches(epoch))
        shape = (len(self.schedule.test_rows), self.algorithm.upload_width)
        for done in range(first_batch + 1, per_epoch):
            if round_score_due(self.job, epoch, done, per_epoch):
                self.parties.expect(EVAL_EMBEDDING, epoch, done, shape)

    def score_round(self, epoch: int, done: int, per_epoch: int) -> None:
        """Score the test rows with every party's model after ``done`` steps of ``epoch``; training goes on."""
        rows = self.schedule.test_rows
        uploads = self.parties.gather(EVAL_EMBEDDING, epoch, done) if self.algorithm.needs_parties_to_predict else {}
        with modes_kept(self.algorithm):
            output = self.algorithm.predict(rows, uploads)
        loss = float(self._loss_fn(output, self.labels[rows]))
        check_finite(loss, "the test loss inside the epoch", epoch=epoch + 1)
        metrics = task_metrics(self.job.task, self.label_array(rows), output.numpy())
        score = RoundScore(epoch * per_epoch + done, loss, metrics)
        self.rounds.append(score)
        log.info("round_scored", step=score.round, test_loss=loss, **metrics)

    def final(
        self, predict_rows: Callable[[np.ndarray], np.ndarray], ids: np.ndarray, run_dir: Path
    ) -> tuple[dict[str, float], np.ndarray | None]:
        """Federated inference on the test rows with the served model: their metrics and the model's output
        (None: no test row); ``test_predictions.csv`` in ``run_dir`` holds them by ID."""
        rows = self.schedule.test_rows
        if len(rows) == 0:
            return {}, None
        # By row, not by ID: the test rows are known, and a list of their IDs would be a Python
        # object per row (2M at 10M aligned rows) only to be looked up again.
        output = predict_rows(rows)
        metrics = task_metrics(self.job.task, self.label_array(rows), output)
        write_predictions(run_dir, self.job.task, ids[rows], self.label_array(rows), output)
        log.info("federated_inference_done", rows=len(rows), **metrics)
        return metrics, output

    def label_array(self, rows: np.ndarray) -> np.ndarray:
        """The true labels of ``rows`` as a flat array (classes, or values), as the metrics take them."""
        return self.labels[rows].numpy().reshape(len(rows), -1).squeeze(-1)
