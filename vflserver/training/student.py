"""The distilled student: a model on the active party's own features, taught by the federated model.

The student is a half of the active party like any algorithm's (``ServerAlgorithm``), with no
passive party in it: ``needs_parties_to_predict`` is False, so the active party evaluates, exports
(ONNX and a Triton repository) and serves it alone, exactly as it does APFed's model. It learns
from two targets per training row (Hinton et al., 2015):

- the teacher's output, the federated model's logits (or values) on that row, computed while the
  passive parties were online (``vflserver.training.distillation``);
- the row's label, the one the job's algorithm trained on (randomised when the job's
  ``[privacy] label_dp_epsilon`` asks for it, so the student is as label-private as the teacher).

Loss per batch, with ``w = label_weight`` and ``T = temperature``::

    classification: w · CE(s, y) + (1 − w) · T² · KL(softmax(t / T) ‖ softmax(s / T))
    regression:     w · MSE(s, y) + (1 − w) · MSE(s, t)

T² keeps the teacher term's gradients on the scale of the label term's as T grows. With ``w = 1``
the teacher term is not computed at all, which is plain training on the labels: the baseline
``make bench-distill`` compares with, through this same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NoReturn

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vflalgorithms.contexts import ActiveContext, AfterStep
from vflalgorithms.factories import ModelSlot
from vflalgorithms.halves import ServerAlgorithm
from vflcore.errors import ConfigError
from vflcore.job.distill import STUDENT_FACTORY, STUDENT_SUFFIX, DistillSpec, student_name
from vflcore.job.schedule import Schedule, model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.models import job_optimizer, load_factory, mlp
from vflcore.runtime.logs import progress
from vflserver.plan.admission import student_slot

__all__ = [
    "NO_PARTIES",
    "Student",
    "default_student",
    "distillation_loss",
    "new_student",
    "student_factory",
    "student_job",
]


class _NoParties:
    """The student's view of the passive parties: there are none, and asking for one is a bug."""

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(f"the student trains on the active party alone; it cannot {name} a passive party")


#: What a student's ``ActiveContext.parties`` holds (``vflalgorithms.contexts.PassivePartiesView``).
NO_PARTIES: Any = _NoParties()


def default_student(
    num_features: int, num_outputs: int, job: JobSpec, top_hidden: tuple[int, ...], top_dropout: float
) -> nn.Module:
    """APFed's active model, g_T(f_A(x)): an encoder (``bottom_hidden`` → ``embedding_dim``) and a head."""
    return nn.Sequential(
        mlp(num_features, job.bottom_hidden, job.embedding_dim),
        mlp(job.embedding_dim, top_hidden, num_outputs, dropout=top_dropout),
    )


def student_factory(spec: DistillSpec | None) -> Callable[..., nn.Module] | None:
    """The student factory ``spec`` names, imported; None for the default student (or no ``[distill]``)."""
    if spec is None or not spec.student_factory:
        return None
    try:
        return load_factory(spec.student_factory)
    except ValueError as exc:
        raise ConfigError(f"[distill] {STUDENT_FACTORY}: {exc}") from None


def distillation_loss(
    task: str, student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, spec: DistillSpec
) -> torch.Tensor:
    """The student's loss on one batch: the label term and the teacher term, weighted (see the module)."""
    hard: torch.Tensor = task_loss(task)(student, labels)
    if spec.label_weight >= 1.0:
        return hard
    if task == "classification":
        t = spec.temperature
        soft = F.kl_div(
            F.log_softmax(student / t, dim=1), F.log_softmax(teacher / t, dim=1), reduction="batchmean", log_target=True
        ) * (t * t)
    else:
        soft = F.mse_loss(student, teacher)
    return spec.label_weight * hard + (1.0 - spec.label_weight) * soft


class Student(ServerAlgorithm):
    """Trains the student on the active party's features against the teacher's outputs and the labels.

    ``teacher`` holds the teacher's raw output for every aligned row (rows × outputs, on the CPU);
    only the training rows' are ever read, as the schedule's batches hold nothing else.
    """

    name = "student"
    needs_parties_to_predict = False
    needs_own_features = True
    resumes_mid_epoch = True
    factory_keys: tuple[str, ...] = (STUDENT_FACTORY,)
    checkpointed: tuple[str, ...] = ("step_losses", "model", "optimizer")

    def __init__(self, ctx: ActiveContext, teacher: torch.Tensor, spec: DistillSpec) -> None:
        super().__init__(ctx)
        job = ctx.job
        width = ctx.features.shape[1]
        if width < 1:
            raise ConfigError("[distill]: the active party has no feature columns; a student predicts from them alone")
        if teacher.shape != (job.num_rows, ctx.num_outputs):
            raise ValueError(
                f"the teacher's outputs are {list(teacher.shape)}; the student needs one row of "
                f"{ctx.num_outputs} per aligned row ({job.num_rows})"
            )
        self.spec = spec
        self.teacher = teacher.to(ctx.device)
        self.model = ctx.model(
            STUDENT_FACTORY,
            lambda n_in, n_out: default_student(n_in, n_out, job, ctx.top_hidden, ctx.top_dropout),
            (width, ctx.num_outputs),
            model_seed(job.seed, ACTIVE_PARTY, "student"),
        )
        self.optimizer = job_optimizer(job, self.model.parameters())

    @classmethod
    def model_slots(cls, job: JobSpec, own_features: int, num_outputs: int) -> dict[str, ModelSlot]:
        return {STUDENT_FACTORY: student_slot(own_features, num_outputs)} if own_features else {}

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        ctx = self.ctx
        batches = ctx.schedule.batches(epoch)
        self.model.train()
        steps = range(first_batch, len(batches))
        for b in progress(steps, total=len(steps), desc=f"student epoch {epoch + 1}"):
            self.record_step(self._step(batches[b]))
            ctx.after_step(epoch, b + 1, len(batches))
        return self.epoch_loss(batches)

    def _step(self, rows: np.ndarray) -> float:
        ctx = self.ctx
        self.optimizer.zero_grad()
        output = self.model(ctx.features[rows])
        loss = distillation_loss(ctx.job.task, output, self.teacher[rows], ctx.labels[rows], self.spec)
        torch.autograd.backward(loss)
        self.optimizer.step()
        return loss.item()

    def eval(self) -> None:
        self.model.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        del uploads  # the student's whole point: the active party's features alone
        out: torch.Tensor = self.model(features)
        return out


def student_job(job: JobSpec, spec: DistillSpec) -> JobSpec:
    """The federated ``job`` as its student runs it: renamed, with the student's epochs.

    The seed, batch size, optimizer and held-out fraction stay the job's, so the student's
    schedule holds out exactly the rows the federated model was evaluated on.
    """
    return replace(
        job,
        job_id=student_name(job.job_id),
        algorithm=f"{job.algorithm}{STUDENT_SUFFIX}",
        epochs=spec.student_epochs(job.epochs),
    )


def new_student(
    job: JobSpec,
    spec: DistillSpec,
    teacher: np.ndarray,
    *,
    features: torch.Tensor,
    labels: torch.Tensor,
    top_hidden: tuple[int, ...],
    top_dropout: float,
    factory: Callable[..., nn.Module] | None = None,
    after_step: AfterStep | None = None,
) -> Student:
    """The untrained student of ``job`` (a ``student_job``), on ``features``, taught by ``teacher``'s outputs.

    ``labels`` are those the federated model trained on; ``factory`` the job's
    ``[distill] student_factory`` (None: ``default_student``). What the active party builds
    after a job (``vflserver.training.distillation``) and what ``make bench-distill`` trains.
    """
    ctx = ActiveContext(
        job=job,
        schedule=Schedule(job),
        parties=NO_PARTIES,
        features=features,
        labels=labels.to(features.device),
        num_outputs=job.num_outputs,
        top_hidden=top_hidden,
        top_dropout=top_dropout,
        factories={STUDENT_FACTORY: factory} if factory is not None else {},
        device=features.device,
    )
    if after_step is not None:
        ctx.after_step = after_step
    return Student(ctx, torch.from_numpy(teacher), spec)
