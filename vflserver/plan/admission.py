"""Admission: the checks of a job that need the active party's table, and reading that table for a plan.

A plan itself (``vflserver.plan.job_plan``) is checked when it is read: at submission, before
the job is queued. What depends on the active party's data (its classes, its feature columns,
the shapes its own model factories and its student must build) is checked here, once the table
is at hand: at submission (``check_models``), so a job that cannot run is refused before
anything starts. The runner reads the same table for the job's run (``read_active_table``).
"""

from __future__ import annotations

from collections.abc import Mapping

from vflalgorithms.factories import PROBE_ROWS, ModelSlot, check_factories
from vflalgorithms.registry import algorithm_spec
from vflcore.data.held_out import HeldOutIds, read_held_out_ids
from vflcore.data.tables import PartyTable, read_party_csv
from vflcore.errors import ConfigError
from vflcore.job.distill import STUDENT_FACTORY, DistillSpec
from vflcore.job.privacy import MARVELL
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.losses import output_width
from vflcore.runtime.config import DataSource, dataset_named
from vflprivacy.label_defences import check_classes
from vflserver.plan.job_plan import JobPlan


def active_source(plan: JobPlan, datasets: Mapping[str, DataSource]) -> DataSource:
    """The active party's dataset for ``plan``; a ConfigError naming the job and the dataset if it lacks it."""
    try:
        return dataset_named(datasets, plan.datasets[ACTIVE_PARTY], "the active party (party 1)")
    except ConfigError as exc:
        raise ConfigError(f"job {plan.job.job_id or '(new)'}: {exc}") from None


def needs_active_table(plan: JobPlan) -> bool:
    """Whether submission reads the active party's table (``check_models``): own models, Marvell, or a student."""
    return bool(plan.factories) or plan.job.privacy.label_defence in MARVELL or plan.distill is not None


def check_models(plan: JobPlan, table: PartyTable, where: str = "job") -> None:
    """Import every factory the job names and run each model on a probe batch of the right shape.

    At submission, with the active party's table at hand (its feature count and label classes fix
    the shapes), so that a factory which cannot work is refused before anything starts; and a
    label defence that cannot protect these labels (Marvell on more than two classes) with it.
    """
    if not needs_active_table(plan) or table.labels is None:
        return
    job = plan.job
    outputs = output_width(job.task, table.labels, table.source)
    if job.task == "classification":
        check_classes(job.privacy, outputs, where)
    if plan.distill is not None:
        _check_student(plan.distill, table, outputs, where)
    if not plan.factories:
        return
    half = algorithm_spec(job.algorithm).active_half()
    slots = half.model_slots(job, table.features.shape[1], outputs)
    try:
        check_factories(plan.factories, job.algorithm, half.factory_keys, slots)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_student(spec: DistillSpec, table: PartyTable, outputs: int, where: str) -> None:
    """A student needs the active party's features; its own factory must build a model of the right shape."""
    require_own_features(table, where)
    if spec.student_factory:
        width = table.features.shape[1]
        given, slots = {STUDENT_FACTORY: spec.student_factory}, {STUDENT_FACTORY: student_slot(width, outputs)}
        try:
            check_factories(given, "the student", (STUDENT_FACTORY,), slots, table="distill")
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def student_slot(own_features: int, num_outputs: int) -> ModelSlot:
    """What ``[distill] student_factory`` is called with and must return, probed at submission."""
    return ModelSlot("the student", (own_features, num_outputs), (PROBE_ROWS, own_features), (PROBE_ROWS, num_outputs))


def require_own_features(table: PartyTable, where: str) -> None:
    """ConfigError unless the active party's ``table`` has feature columns: the student's only input."""
    if not table.features.shape[1]:
        raise ConfigError(
            f"{where}: [distill] trains a student on the active party's own features, and its dataset "
            f"({table.source}) has none; remove [distill] or give the active party feature columns"
        )


def read_active_table(plan: JobPlan, datasets: Mapping[str, DataSource]) -> PartyTable:
    """The active party's table for ``plan``: with labels to train, or only the IDs for a PSI-only job."""
    source = active_source(plan, datasets)
    if plan.psi_only:  # only the ID column matters: labels and features may be absent or anything
        return read_party_csv(source.path, id_column=source.id_column, feature_columns=())
    return read_party_csv(source.path, id_column=source.id_column, label_column=source.label_column)


def read_held_out(plan: JobPlan, datasets: Mapping[str, DataSource]) -> HeldOutIds | None:
    """The test IDs the active party's dataset names (``held_out_ids``), or None: the job's ``test_fraction``.

    DataError names the file if it cannot be used. A PSI-only job trains nothing, so it reads none.
    """
    path = active_source(plan, datasets).held_out_ids
    return None if path is None or plan.psi_only else read_held_out_ids(path)
