"""Distil a federated model into a student the active party serves alone (a job's ``[distill]``).

After the federated model is trained and evaluated, and while every passive party is still
online, the active party asks the federated model for its output on every training row: the
**teacher's outputs**. They stay in the active party's run folder (``student/teacher.npy``,
mode 0600) and never cross the wire. From then on no passive party is needed: the student
(``vflserver.training.student``) trains on the active party's own features against those
outputs and the labels, is evaluated on the held-out rows, and is exported as ONNX and into the
Triton repository under ``<job>-student``, where the inference endpoint and ``vfl-score`` take
it as they take APFed's model.

Resumption: the student checkpoints like any half (``[job] checkpoint_every_steps`` and every
epoch's end) into ``student/``. A job resumed after the federated model was finished reloads the
saved teacher's outputs and the newest student checkpoint taught by them (each checkpoint holds
the outputs' digest), and ends with the student an uninterrupted run trains. A job that trained
any federated step in this attempt starts its distillation afresh: its teacher is new.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import structlog
import torch
from torch import nn

from vflcore.data.checkpoints import atomic_write, discard_after, readable_checkpoints
from vflcore.data.tables import PartyTable
from vflcore.errors import JobAborted
from vflcore.job.distill import DistillSpec
from vflcore.job.schedule import Position, Schedule, mid_epoch_checkpoint_due
from vflcore.job.spec import JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.metrics import task_metrics
from vflcore.ml.models import seed_dropout
from vflserver.training.aligned_predictions import in_blocks
from vflserver.training.export import export_model
from vflserver.training.reports import EpochReport, RunSummary, write_predictions, write_summary
from vflserver.training.resume import load_newest, save_checkpoint
from vflserver.training.student import Student, new_student, student_job

__all__ = ["STUDENT_DIR", "TEACHER_FILE", "Distillation"]

log = structlog.get_logger(__name__)

#: The student's folder in the active party's run folder: teacher's outputs, checkpoints, model.
STUDENT_DIR = "student"
#: The teacher's outputs on every aligned row (rows × outputs, float32), as NumPy's ``.npy``.
TEACHER_FILE = "teacher.npy"

#: Predicts aligned rows with the federated model (``AlignedPredictor.predict_rows``): the teacher.
Teacher = Callable[[np.ndarray], np.ndarray]


class Distillation:
    """The student's run on the active party, from the teacher's outputs to the served model.

    ``job`` and ``schedule`` are the federated job's (the same held-out rows), ``aligned`` its
    aligned table, ``features`` those rows' features on the party's device; ``train_labels``
    are the labels the federated algorithm trained on, ``labels`` the true ones (evaluation).
    ``party_dir`` is the active party's run folder, ``repository_root`` the Triton repository.
    """

    def __init__(
        self,
        job: JobSpec,
        spec: DistillSpec,
        *,
        aligned: PartyTable,
        features: torch.Tensor,
        train_labels: torch.Tensor,
        labels: torch.Tensor,
        party_dir: Path,
        repository_root: Path,
        keep_checkpoints: int,
        top_hidden: Sequence[int],
        top_dropout: float,
        factory: Callable[..., nn.Module] | None,
        stop_event: threading.Event,
    ) -> None:
        self.spec = spec
        self.job = student_job(job, spec)
        self.name = self.job.job_id
        self.schedule = Schedule(self.job)
        self.folder = party_dir / STUDENT_DIR
        self.aligned, self.features, self.train_labels, self.labels = aligned, features, train_labels, labels
        self.repository_root, self.keep = repository_root, keep_checkpoints
        self.top_hidden, self.top_dropout = tuple(top_hidden), top_dropout
        self.factory = factory
        self.stop_event = stop_event
        # Set by run():
        self._student: Student
        self._summary: RunSummary
        self._digest = ""

    # ---- the teacher --------------------------------------------------------------------------

    def teacher_outputs(self, teacher: Teacher, test_output: np.ndarray | None, *, afresh: bool) -> np.ndarray:
        """The teacher's output on every aligned row: the saved one, unless ``afresh``; else computed and saved.

        ``afresh`` when this attempt trained any federated step (or the job starts over): the
        saved outputs, and the student taught by them, came from an earlier teacher and go.
        ``test_output`` is the teacher's output on the held-out rows if already at hand (the
        final evaluation computed it); the training rows are asked of the federated model here.
        """
        path = self.folder / TEACHER_FILE
        if afresh:
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            saved = self._saved_teacher(path)
            if saved is not None:
                log.info("teacher_outputs_reused", rows=len(saved))
                return saved
        started = time.perf_counter()
        schedule = self.schedule
        outputs = np.zeros((self.job.num_rows, self.job.num_outputs), dtype=np.float32)
        outputs[schedule.train_rows] = teacher(schedule.train_rows)
        if len(schedule.test_rows):
            outputs[schedule.test_rows] = test_output if test_output is not None else teacher(schedule.test_rows)
        self.folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.save(buffer, outputs, allow_pickle=False)
        atomic_write(buffer.getvalue(), path)  # 0600: the teacher's outputs say what the passive parties' data say
        log.info("teacher_outputs_saved", rows=len(outputs), seconds=round(time.perf_counter() - started, 2))
        return outputs

    def _saved_teacher(self, path: Path) -> np.ndarray | None:
        """The saved outputs if they load and fit this job's rows and outputs; None (and a warning) otherwise."""
        if not path.exists():
            return None
        try:
            saved: np.ndarray = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            log.warning("teacher_outputs_unreadable", path=str(path), error=str(exc))
            return None
        if saved.shape != (self.job.num_rows, self.job.num_outputs) or saved.dtype != np.float32:
            log.warning("teacher_outputs_unreadable", path=str(path), error=f"shape {list(saved.shape)} {saved.dtype}")
            return None
        return saved

    # ---- the student --------------------------------------------------------------------------

    def run(self, teacher_outputs: np.ndarray, *, on_epoch: Callable[[EpochReport], None] | None = None) -> RunSummary:
        """Train the student (from its newest checkpoint taught by these outputs), evaluate, export it.

        Returns the student's own summary, also written to ``student/summary.json``: its epochs,
        its final metrics on the held-out rows (for classification with ``teacher_agreement``,
        how often its class is the teacher's) and its model files.
        """
        self._digest = hashlib.sha256(teacher_outputs.tobytes()).hexdigest()
        self._summary = summary = RunSummary(job_id=self.name, run_dir=self.folder)
        self._student = student = new_student(
            self.job,
            self.spec,
            teacher_outputs,
            features=self.features,
            labels=self.train_labels,
            top_hidden=self.top_hidden,
            top_dropout=self.top_dropout,
            factory=self.factory,
            after_step=self._after_step,
        )
        seed_dropout(self.job, "student")
        first = self._roll_back()
        log.info(
            "distillation_started",
            student=self.name,
            epochs=self.job.epochs,
            at=str(first),
            temperature=self.spec.temperature,
            label_weight=self.spec.label_weight,
        )
        evaluated: tuple[float, dict[str, float], np.ndarray] | None = None  # the last epoch's: the final model's
        for epoch in range(first.epoch, self.job.epochs):
            self._check_stop()
            started = time.perf_counter()
            train_loss = student.train_epoch(epoch, first.batch if epoch == first.epoch else 0)
            evaluated = test_loss, metrics, _ = self._evaluate()
            report = EpochReport(epoch, train_loss, test_loss, metrics, time.perf_counter() - started)
            summary.epochs.append(report)
            self._save(Position.after_epoch(epoch))
            log.info("student_epoch_done", epoch=epoch, train_loss=train_loss, test_loss=test_loss, **metrics)
            if on_epoch is not None:
                on_epoch(report)
        _, metrics, output = evaluated if evaluated is not None else self._evaluate()  # resumed at the end
        summary.final_metrics = dict(metrics)
        rows = self.schedule.test_rows
        if len(rows):
            write_predictions(self.folder, self.job.task, self.aligned.ids[rows], self._label_array(rows), output)
            if self.job.task == "classification":
                agree = output.argmax(axis=1) == teacher_outputs[rows].argmax(axis=1)
                summary.final_metrics["teacher_agreement"] = float(np.mean(agree))
        export_model(self.job, self.aligned, student, self.schedule, self.folder, self.repository_root, summary)
        write_summary(self.folder, self.job, summary, student.step_losses)
        log.info("distillation_done", student=self.name, **summary.final_metrics)
        return summary

    def _after_step(self, epoch: int, done: int, per_epoch: int) -> None:
        """A cancelled job stops within one student step; ``[job] checkpoint_every_steps`` applies here too."""
        self._check_stop()
        if mid_epoch_checkpoint_due(self.job, epoch, done, per_epoch):
            self._save(Position(epoch, done))

    def _save(self, position: Position) -> None:
        extra = {"teacher": self._digest}
        save_checkpoint(self.folder, position, self._student, self._summary.epochs, keep=self.keep, extra=extra)

    def _roll_back(self) -> Position:
        """Load the newest readable checkpoint taught by these outputs; Position(0, 0) if none."""
        loaded = load_newest(
            self.folder,
            readable_checkpoints(self.folder),
            self._student,
            fits=lambda state: state.get("teacher") == self._digest,  # another teacher's student starts over
        )
        if loaded is None:
            discard_after(self.folder, Position(0, 0))
            return Position(0, 0)
        position, self._summary.epochs = loaded
        log.info("student_resumed", at=str(position), epoch=position.epoch, batch=position.batch)
        return position

    def _check_stop(self) -> None:
        if self.stop_event.is_set():
            raise JobAborted("shutdown requested")

    def _evaluate(self) -> tuple[float, dict[str, float], np.ndarray]:
        """Loss, metrics and raw output on the held-out rows (true labels), a block of rows at a time."""
        rows, student = self.schedule.test_rows, self._student
        if not len(rows):
            return float("nan"), {}, np.zeros((0, self.job.num_outputs), dtype=np.float32)
        output = torch.cat(in_blocks(rows, lambda block: student.predict(block, {})))
        loss = float(task_loss(self.job.task)(output, self.labels[rows].cpu()))
        return loss, task_metrics(self.job.task, self._label_array(rows), output.numpy()), output.numpy()

    def _label_array(self, rows: np.ndarray) -> np.ndarray:
        return self.labels[rows].cpu().numpy().reshape(len(rows), -1).squeeze(-1)
