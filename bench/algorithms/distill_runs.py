"""One run of the distillation bench (``bench.algorithms.distill``): a task, a method and a seed in, scores out.

Kept apart from the report so that a worker process imports only what it trains. Every method
trains through the code the product runs, so the benchmark measures that code and not a copy:
SingleVL and APFed through ``ReferenceAPFed`` (as ``bench.algorithms.apfed`` does; SingleVL is APFed with no
passive party), the federated teacher through ``ReferenceSplitNN``, and both students through the
product's ``Student`` half, with its job, schedule and context built as
``vflserver.training.distillation`` builds them. A teacher run also trains the two students,
because the distilled one reads the teacher's outputs; the label-only student trains there too,
so that both students share that seed's split and initialisation.

Architecture, optimizer and epochs are the APFed bench's (``bench.algorithms.apfed_runs``), imported rather
than copied, for every task and every method. A run is a small frozen value so that it can cross
to a worker process and come back as the key of its result.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits

from bench.algorithms.apfed_runs import (
    EPOCHS,
    PASSIVE,
    TEMPERATURE,
    TOP_DROPOUT,
    TOP_HIDDEN,
    party_views,
    shared_job,
)
from vflalgorithms.apfed.maths import APFED_C, APFED_R
from vflalgorithms.apfed.reference import ReferenceAPFed
from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflcore.job.distill import DistillSpec
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.metrics import task_metrics
from vflcore.ml.models import seed_dropout
from vflserver.training.student import new_student, student_job

TASKS = ("digits", "breast_cancer", "diabetes")
#: The job's task of each benchmark task; diabetes' target is a number, the others' a class.
TASK_KIND = {"digits": "classification", "breast_cancer": "classification", "diabetes": "regression"}
#: The APFed bench's setting for digits: the active party holds pixel rows 0-2, party 2 rows 3-5, party 3 rows 6-7.
DIGITS_SETTING = "3-1"
#: Feature columns of (the active party, party 2, party 3) on the tabular tasks, in the order of a
#: fixed permutation of the columns: the active party holds a minority of them.
SHARES = {"breast_cancer": (8, 11, 11), "diabetes": (3, 4, 3)}
PERMUTATION_SEED = 0

# The methods, as the report labels them. "APFed" is APFed-C on classification, APFed-R on regression.
SINGLE_VL = "SingleVL"
APFED = "APFed"
TEACHER = "Teacher (SplitNN)"
STUDENT = "Student (distilled)"
LABELS_ONLY = "Student (labels only)"
#: Not a method: the teacher scored on the rows it trained on. How close it comes to 100 says how
#: much its outputs there can teach beyond the labels (an overfitted teacher's are the labels).
TEACHER_FIT = "Teacher, on its own training rows"
METHODS = (SINGLE_VL, APFED, TEACHER, STUDENT, LABELS_ONLY, TEACHER_FIT)

#: What a run trains: "teacher" is SplitNN, then both students from it.
KINDS = ("single", "apfed", "teacher")
#: The distilled student's settings: the product's defaults, never tuned here.
DISTILLED = DistillSpec()
#: The same student on the true labels alone: the teacher term is not computed at all.
LABELS_ONLY_SPEC = DistillSpec(label_weight=1.0)


@dataclass(frozen=True)
class Run:
    """One pool task: ``epochs`` of every model it trains (the APFed bench's, fewer with ``--quick``)."""

    task: str
    kind: str
    seed: int
    epochs: int = EPOCHS


@dataclass(frozen=True)
class Result:
    """A run's held-out scores in points (accuracy %, or R² × 100), by method label, and its wall time."""

    run: Run
    scores: dict[str, float]
    seconds: float


@dataclass(frozen=True)
class TaskData:
    """One task's aligned rows: the job's task, every party's features (float32), the labels (float64)."""

    kind: str
    views: dict[int, torch.Tensor]
    labels: torch.Tensor


def apfed_variant(task: str) -> str:
    """Which APFed the "APFed" row is on ``task``: APFed-C's contrastive loss needs no target to reconstruct."""
    return "APFed-C" if TASK_KIND[task] == "classification" else "APFed-R"


@functools.cache
def load_task(task: str) -> TaskData:
    """The rows of ``task``, cut into the three parties' views; loaded once per process."""
    if task == "digits":
        labels = load_digits().target.astype(np.float64)
        return TaskData(TASK_KIND[task], party_views(DIGITS_SETTING), torch.from_numpy(labels))
    loader = {"breast_cancer": load_breast_cancer, "diabetes": load_diabetes}[task]
    features, target = loader(return_X_y=True)
    features = (features - features.mean(axis=0)) / features.std(axis=0)  # z-score over all rows
    if TASK_KIND[task] == "regression":
        target = (target - target.mean()) / target.std()
    order = np.random.default_rng(PERMUTATION_SEED).permutation(features.shape[1])
    columns = np.split(order, np.cumsum(SHARES[task])[:-1])
    views = {
        party: torch.from_numpy(np.ascontiguousarray(features[:, cut], dtype=np.float32))
        for party, cut in zip((ACTIVE_PARTY, *PASSIVE), columns, strict=True)
    }
    return TaskData(TASK_KIND[task], views, torch.from_numpy(np.asarray(target, dtype=np.float64)))


def job_for(run: Run, data: TaskData) -> JobSpec:
    """The job of ``run``: the shared hyperparameters, the run's seed (model init and train/test split)."""
    options: dict[str, float] = {}
    passive: tuple[int, ...] = PASSIVE
    if run.kind == "teacher":
        algorithm = "splitnn"
    elif run.kind == "single":
        algorithm, passive, options = APFED_R, (), {"weight": 0.0}
    elif data.kind == "classification":
        algorithm, options = APFED_C, {"weight": 1.0, "temperature": TEMPERATURE}
    else:
        algorithm, options = APFED_R, {"weight": 1.0}
    job_id = f"distill-{run.task}-{run.kind}-{run.seed}"
    return shared_job(
        job_id,
        algorithm,
        run.seed,
        num_rows=len(data.labels),
        passive=passive,
        options=options,
        task=data.kind,
        epochs=run.epochs,
    )


def score(data: TaskData, output: torch.Tensor | np.ndarray, rows: np.ndarray) -> float:
    """Points on the held-out ``rows``: accuracy % for classification, R² × 100 for regression.

    Both from ``task_metrics``, as the product reports them; its R² is 1 − SSE/SST on these rows.
    """
    values = output.numpy() if isinstance(output, torch.Tensor) else output
    metrics = task_metrics(data.kind, data.labels[rows].numpy(), values)
    return 100 * metrics["accuracy" if data.kind == "classification" else "r2"]


def _train_apfed(run: Run, data: TaskData) -> dict[str, float]:
    """APFed (or SingleVL: no passive party at all), scored on the active party alone (Eq. 11)."""
    job = job_for(run, data)
    model = ReferenceAPFed(
        job,
        {p: data.views[p] for p in (ACTIVE_PARTY, *job.passive_parties)},
        data.labels,
        top_hidden=TOP_HIDDEN,
        top_dropout=TOP_DROPOUT,
    )
    for epoch in range(job.epochs):
        model.train_epoch(epoch)
    test = model.schedule.test_rows
    return {SINGLE_VL if run.kind == "single" else APFED: score(data, model.predict(test), test)}


def train_student(teacher: ReferenceSplitNN, outputs: np.ndarray, spec: DistillSpec) -> torch.Tensor:
    """The product's student of ``teacher``, trained on its ``outputs``; returns its output on the held-out rows.

    Built as the active party builds it after a job (``new_student`` on the ``student_job`` of the
    federated job, with the output width the active party sets), so its held-out rows are the
    teacher's; its labels are the ones the teacher trained on.
    """
    job = student_job(replace(teacher.job, num_outputs=teacher.num_outputs), spec)
    student = new_student(
        job,
        spec,
        outputs,
        features=teacher.features[ACTIVE_PARTY],
        labels=teacher.labels,
        top_hidden=teacher.top_hidden,
        top_dropout=teacher.top_dropout,
    )
    seed_dropout(job, "student")
    for epoch in range(job.epochs):
        student.train_epoch(epoch)
    return student.predict(student.ctx.schedule.test_rows, {})


def _train_teacher_and_students(run: Run, data: TaskData) -> dict[str, float]:
    """SplitNN with every party, then the distilled and the label-only student on the active party's features."""
    job = job_for(run, data)
    teacher = ReferenceSplitNN(job, data.views, data.labels, top_hidden=TOP_HIDDEN, top_dropout=TOP_DROPOUT)
    for epoch in range(job.epochs):
        teacher.train_epoch(epoch)
    outputs = teacher.predict(np.arange(job.num_rows)).numpy().astype(np.float32)  # every aligned row
    train, test = teacher.schedule.train_rows, teacher.schedule.test_rows
    return {
        TEACHER: score(data, outputs[test], test),
        TEACHER_FIT: score(data, outputs[train], train),
        STUDENT: score(data, train_student(teacher, outputs, DISTILLED), test),
        LABELS_ONLY: score(data, train_student(teacher, outputs, LABELS_ONLY_SPEC), test),
    }


def execute(run: Run) -> Result:
    """Train and score one run; what a worker process calls."""
    if run.kind not in KINDS:
        raise ValueError(f"unknown run kind {run.kind!r}; choose one of {', '.join(KINDS)}")
    started = time.perf_counter()
    data = load_task(run.task)
    train = _train_teacher_and_students if run.kind == "teacher" else _train_apfed
    return Result(run, train(run, data), time.perf_counter() - started)
