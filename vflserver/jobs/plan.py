"""A job document, checked and turned into what the runner needs: the job, the datasets, the options.

A job document is a job file's TOML tables as a JSON object. The job file holds what a one-job
server config holds under ``[job]``, ``[algorithm]``, ``[model]`` and ``[serving]``, plus which
dataset each party uses::

    [job]
    algorithm = "splitnn"
    passive_parties = [2, 3]
    epochs = 20
    dataset = "digits"            # every party's dataset name (default: "default", a config's [data])
    model = "small"               # every passive party's model: a name in its own [models] table
    join_timeout_s = 120          # how long to wait for an offline party (default: the server's)

    [job.datasets]                # optional: another name for some parties
    3 = "digits-2024"
    [job.models]                  # optional: another model name for some parties
    3 = "conv"

    [algorithm]                   # the algorithm's options
    [model]                       # top_hidden, top_dropout; the active party's own model factories:
    top_factory = "mymodels:top"  # "module:function" per model the algorithm takes (docs/configuration.md)
    [serving]                     # enabled (serve the model once trained; default true), degraded
    [privacy]                     # the defences each party applies (vflcore.privacy; all off by default)
    [distill]                     # also train a student the active party serves alone (settings: docs)

Everything is checked at submission, so a job that cannot run is refused before it is queued,
with a message that names the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from vflalgorithms.base import algorithm_spec
from vflalgorithms.factories import FACTORY_KEYS, check_factories, refuse_untaken
from vflalgorithms.label_protection import check_privacy_applies
from vflcore.data.tables import PartyTable, read_party_csv
from vflcore.errors import ConfigError
from vflcore.job import ACTIVE_PARTY, JobSpec, settable_fields
from vflcore.ml.losses import label_tensor
from vflcore.runtime.config import DEFAULT_DATASET, DataSource, Section, dataset_named, job_from_document
from vflprivacy.label_defences import check_classes
from vflserver.inference.config import DEGRADED_MODES
from vflserver.training.distill_settings import (
    STUDENT_FACTORY,
    DistillSpec,
    distill_from_table,
    require_own_features,
)
from vflserver.training.student import student_slot

#: The tables of a job document; anything else is refused by name.
TABLES = ("job", "algorithm", "model", "serving", "privacy", "distill")
_SERVING_KEYS = ("enabled", "degraded")
_MODEL_KEYS = ("top_hidden", "top_dropout", *FACTORY_KEYS)
#: ``[job]`` keys besides the ``JobSpec`` fields: they say how the service runs the job.
_SERVICE_KEYS = ("dataset", "datasets", "model", "models", "join_timeout_s", "psi_only")


def job_keys() -> tuple[str, ...]:
    """Every key a job document's ``[job]`` may hold: a typo is refused, not silently ignored."""
    return (*(f.name for f in settable_fields()), *_SERVICE_KEYS)


@dataclass(frozen=True)
class JobPlan:
    """One job as the runner runs it."""

    job: JobSpec
    #: Party id (1 is the active party) -> the name of the dataset that party uses.
    datasets: dict[int, str]
    join_timeout_s: float
    top_hidden: tuple[int, ...] = (64,)
    top_dropout: float = 0.0
    #: Align IDs by PSI, write the aligned IDs, and end (``vfl-server --psi-only``).
    psi_only: bool = False
    #: Serve the trained model on the inference endpoint (if the server runs one).
    serve: bool = True
    degraded: str = "none"
    #: The active party's own model factories: ``[model]`` key → ``module:function``.
    factories: dict[str, str] = field(default_factory=dict)
    #: Passive party id -> the name, in its own ``[models]`` table, of the model it builds (absent: its default).
    models: dict[int, str] = field(default_factory=dict)
    #: ``[distill]``: distil the trained model into a student the active party serves alone (None: no table).
    distill: DistillSpec | None = None


def plan_from_document(doc: Mapping[str, Any], *, default_join_timeout_s: float, where: str = "job") -> JobPlan:
    """Check a job document and build its plan; a ConfigError names the table and key at fault."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: a job document is a table of tables ({', '.join(TABLES)})")
    unknown = sorted(set(doc) - set(TABLES))
    if unknown:
        raise ConfigError(f"{where}: [{unknown[0]}] is not a job table; a job file has {list(TABLES)}")
    _refuse_unknown(doc, "job", job_keys(), where)
    _refuse_unknown(doc, "model", _MODEL_KEYS, where)
    job = job_from_document(doc, where)
    spec = algorithm_spec(job.algorithm)  # an unknown algorithm, or a bad option, is refused now
    spec.options(job.algorithm_options)
    check_privacy_applies(job, spec.active_half(), where)
    if job.checkpoint_every_steps and not spec.active_half().resumes_mid_epoch:
        raise ConfigError(
            f"{where}: [job] checkpoint_every_steps = {job.checkpoint_every_steps}: {job.algorithm} resumes only "
            "at the end of an epoch (it checkpoints every epoch); remove the key or set it to 0"
        )
    sec = Section(doc, "job", where)
    model = Section(doc, "model", where)
    top_dropout = float(model.number("top_dropout", 0.0))
    if not 0.0 <= top_dropout < 1.0:
        raise ConfigError(f"{where}: [model] top_dropout = {top_dropout}; give a rate in [0, 1) (0 turns it off)")
    join_timeout = sec.number("join_timeout_s", default_join_timeout_s)
    if join_timeout <= 0:
        raise ConfigError(f"{where}: [job] join_timeout_s must be positive")
    psi_only = sec.raw.get("psi_only", False)
    if not isinstance(psi_only, bool):
        raise ConfigError(f"{where}: [job] psi_only = {psi_only!r} must be true or false")
    serving = Section(doc, "serving", where)
    extra = sorted(set(serving.raw) - set(_SERVING_KEYS))
    if extra:
        raise ConfigError(
            f"{where}: [serving] {extra[0]} belongs in the server's config; a job's [serving] has {list(_SERVING_KEYS)}"
        )
    serve = serving.raw.get("enabled", True)
    if not isinstance(serve, bool):
        raise ConfigError(f"{where}: [serving] enabled = {serve!r} must be true or false")
    degraded = serving.text("degraded", "none")
    if degraded not in DEGRADED_MODES:
        raise ConfigError(f"{where}: [serving] degraded = {degraded!r}; choose one of {list(DEGRADED_MODES)}")
    distill = distill_from_table(doc["distill"], where, task=job.task) if "distill" in doc else None
    if distill is not None and psi_only:
        raise ConfigError(f"{where}: [distill] needs a trained model, and a psi_only job trains none; remove one")
    factories = {key: model.text(key) for key in FACTORY_KEYS if key in model.raw}
    try:
        refuse_untaken(factories, job.algorithm, spec.active_half().factory_keys)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return JobPlan(
        job=job,
        factories=factories,
        datasets=_datasets(sec, job),
        models=_models(sec, job),
        join_timeout_s=join_timeout,
        top_hidden=model.integers("top_hidden", (64,)),
        top_dropout=top_dropout,
        psi_only=psi_only,
        serve=serve,
        degraded=degraded,
        distill=distill,
    )


def active_source(plan: JobPlan, datasets: Mapping[str, DataSource]) -> DataSource:
    """The active party's dataset for ``plan``; a ConfigError naming the job and the dataset if it lacks it."""
    try:
        return dataset_named(datasets, plan.datasets[ACTIVE_PARTY], "the active party (party 1)")
    except ConfigError as exc:
        raise ConfigError(f"job {plan.job.job_id or '(new)'}: {exc}") from None


def needs_active_table(plan: JobPlan) -> bool:
    """Whether submission reads the active party's table (``check_models``): own models, Marvell, or a student."""
    return bool(plan.factories) or plan.job.privacy.label_defence == "marvell" or plan.distill is not None


def check_models(plan: JobPlan, table: PartyTable, where: str = "job") -> None:
    """Import every factory the job names and run each model on a probe batch of the right shape.

    At submission, with the active party's table at hand (its feature count and label classes fix
    the shapes), so that a factory which cannot work is refused before anything starts; and a
    label defence that cannot protect these labels (Marvell on more than two classes) with it.
    """
    if not needs_active_table(plan) or table.labels is None:
        return
    job = plan.job
    _, outputs = label_tensor(job.task, torch.from_numpy(np.asarray(table.labels, dtype=np.float64)))
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


def read_active_table(plan: JobPlan, datasets: Mapping[str, DataSource]) -> PartyTable:
    """The active party's table for ``plan``: with labels to train, or only the IDs for a PSI-only job."""
    source = active_source(plan, datasets)
    if plan.psi_only:  # only the ID column matters: labels and features may be absent or anything
        return read_party_csv(source.path, id_column=source.id_column, feature_columns=())
    return read_party_csv(source.path, id_column=source.id_column, label_column=source.label_column)


def _refuse_unknown(doc: Mapping[str, Any], table: str, known: tuple[str, ...], where: str) -> None:
    raw = doc.get(table, {})
    unknown = sorted(set(raw) - set(known)) if isinstance(raw, Mapping) else []
    if unknown:
        raise ConfigError(f"{where}: [{table}] has no key {unknown[0]!r}; the keys are {sorted(known)}")


def _datasets(sec: Section, job: JobSpec) -> dict[int, str]:
    """Each party's dataset name: ``[job] dataset`` for all, ``[job.datasets]`` for exceptions."""
    return _names_by_party(
        sec,
        "datasets",
        (ACTIVE_PARTY, *job.passive_parties),
        sec.text("dataset", DEFAULT_DATASET),
        what="dataset name",
        outside=f"not a party of this job (party 1 and {list(job.passive_parties)})",
        rule="must be a dataset name",
    )


def _models(sec: Section, job: JobSpec) -> dict[int, str]:
    """Each passive party's model name: ``[job] model`` for all, ``[job.models]`` for exceptions.

    The names mean something only in each party's own ``[models]`` table; the party resolves its
    name when the job is offered, and refuses a name it lacks before PSI.
    """
    return _names_by_party(
        sec,
        "models",
        job.passive_parties,
        sec.text("model", ""),
        what="model name",
        outside=f"not a passive party of this job ({list(job.passive_parties)}); "
        "the active party's own models are [model] factories",
        rule="must be a model name from that party's [models] table",
    )


def _names_by_party(
    sec: Section, table: str, parties: tuple[int, ...], every: str, *, what: str, outside: str, rule: str
) -> dict[int, str]:
    """``every`` for each of ``parties`` (nobody if it is ""), then ``[job.<table>]``'s party id = name exceptions."""
    names = dict.fromkeys(parties, every) if every else {}
    overrides = sec.raw.get(table, {})
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{sec.where}: [job.{table}] must be a table of party id = {what}")
    for key, name in overrides.items():
        party = int(key) if str(key).isdigit() else None
        if party not in parties:
            raise ConfigError(f"{sec.where}: [job.{table}] {key}: {outside}")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{sec.where}: [job.{table}] {key} {rule}")
        names[party] = name
    return names
