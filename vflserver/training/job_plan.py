"""A job document, read and checked into the ``JobPlan`` the runner hands to ``ActiveParty``.

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

Every ``JobPlan`` is checked when it is made, from a document or in code, so a job that cannot
run is refused at submission, before it is queued, with a message that names the key; the
active party trusts the plan it is handed. Why on the training floor: the runner (``jobs``) and
``ActiveParty`` (``training``) both hold it. The checks that need the active party's table (its
classes, its feature columns) are made where the table is read: ``vflserver.jobs.plan``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vflalgorithms.factories import FACTORY_KEYS, refuse_untaken
from vflalgorithms.label_protection import check_privacy_applies
from vflalgorithms.registry import algorithm_spec
from vflcore.errors import ConfigError
from vflcore.job import ACTIVE_PARTY, JobSpec, settable_fields
from vflcore.job_rules import read_job, validate_job
from vflcore.privacy import privacy_keys
from vflcore.runtime.config import DEFAULT_DATASET
from vflcore.settings import (
    Section,
    Tables,
    check_declared,
    one_of,
    positive,
    read_settings,
    refuse_unknown_tables,
    setting,
    table_keys,
    within,
)
from vflserver.inference.config import DEGRADED_MODES
from vflserver.training.distill_settings import DistillSpec, distill_from_table, distill_keys

#: The tables of a job document; anything else is refused by name.
TABLES = ("job", "algorithm", "model", "serving", "privacy", "distill")
#: ``[job]`` keys that name each party's dataset and model (assembled into ``JobPlan.datasets``, ``.models``).
_NAME_KEYS = ("dataset", "datasets", "model", "models")


#: ``[model] top_dropout``: a rate in [0, 1); 1 would drop every unit.
_dropout = within(0, 1, "give a rate in [0, 1) (0 turns it off)")


@dataclass(frozen=True)
class JobPlan:
    """One job as the runner runs it and ``ActiveParty`` trains it; checked when made (``check_plan``)."""

    job: JobSpec
    #: Party id (1 is the active party) -> the name of the dataset that party uses.
    datasets: dict[int, str] = field(default_factory=dict)
    #: How long the job waits for its passive parties; a document's default is the server's own.
    join_timeout_s: float = field(default=300.0, metadata=setting("job", check=positive))
    top_hidden: tuple[int, ...] = field(default=(64,), metadata=setting("model"))
    top_dropout: float = field(default=0.0, metadata=setting("model", check=_dropout))
    #: Align IDs by PSI, write the aligned IDs, and end (``vfl-server --psi-only``).
    psi_only: bool = field(default=False, metadata=setting("job"))
    #: Serve the trained model on the inference endpoint (if the server runs one).
    serve: bool = field(default=True, metadata=setting("serving", key="enabled"))
    degraded: str = field(default="none", metadata=setting("serving", check=one_of(DEGRADED_MODES)))
    #: The active party's own model factories: ``[model]`` key → ``module:function``.
    factories: dict[str, str] = field(default_factory=dict)
    #: Passive party id -> the name, in its own ``[models]`` table, of the model it builds (absent: its default).
    models: dict[int, str] = field(default_factory=dict)
    #: ``[distill]``: distil the trained model into a student the active party serves alone (None: no table).
    distill: DistillSpec | None = None
    #: Where the plan came from, for its errors: a job file, "job", or the Control API's caller.
    where: str = field(default="job", compare=False, repr=False)

    def __post_init__(self) -> None:
        check_declared(self, self.where)
        check_plan(self)


def job_keys() -> tuple[str, ...]:
    """Every key a job document's ``[job]`` may hold: a typo is refused, not silently ignored."""
    return (*(f.name for f in settable_fields()), *table_keys(JobPlan, "job"), *_NAME_KEYS)


def job_tables() -> Tables:
    """Every table of a job document, with its keys; ``[algorithm]``'s are its algorithm's (``spec.options``)."""
    return {
        "job": job_keys(),
        "algorithm": None,
        "model": (*table_keys(JobPlan, "model"), *FACTORY_KEYS),
        "serving": table_keys(JobPlan, "serving"),
        "privacy": privacy_keys(),
        "distill": distill_keys(),
    }


#: Where a key refused in a job's table belongs instead.
_HINTS = {"serving": "; where the endpoint listens and who may call it belong in the server's config"}


def check_plan(plan: JobPlan) -> None:
    """Refuse a plan no party can run: the job's rules, its algorithm's options, what its defences apply to."""
    job, where = plan.job, plan.where
    validate_job(job, where)
    spec = algorithm_spec(job.algorithm)  # an unknown algorithm, or a bad option, is refused now
    spec.options(job.algorithm_options)
    half = spec.active_half()
    check_privacy_applies(job, half, where)
    if job.checkpoint_every_steps and not half.resumes_mid_epoch:
        raise ConfigError(
            f"{where}: [job] checkpoint_every_steps = {job.checkpoint_every_steps}: {job.algorithm} resumes only "
            "at the end of an epoch (it checkpoints every epoch); remove the key or set it to 0"
        )
    if job.eval_every_rounds and not half.scores_inside_epoch:
        raise ConfigError(
            f"{where}: [job] eval_every_rounds = {job.eval_every_rounds}: {job.algorithm} scores the test rows only "
            "at the end of an epoch; remove the key or set it to 0"
        )
    if plan.distill is not None and plan.psi_only:
        raise ConfigError(f"{where}: [distill] needs a trained model, and a psi_only job trains none; remove one")
    try:
        refuse_untaken(plan.factories, job.algorithm, half.factory_keys)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def plan_from_document(
    doc: Mapping[str, Any], *, default_join_timeout_s: float, where: str = "job", job_id: str = ""
) -> JobPlan:
    """Read a job document into its plan; a ConfigError names the table and key at fault.

    ``job_id`` names a job whose document names none (the store's id for it), before the plan is
    made: a plan is checked once, when it is made, and ``replace`` would make it again.
    """
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: a job document is a table of tables ({', '.join(TABLES)})")
    refuse_unknown_tables(doc, where, job_tables(), hints=_HINTS)
    sec, model = Section(doc, "job", where), Section(doc, "model", where)
    job = read_job(doc, where)
    if job_id and not job.job_id:
        job = replace(job, job_id=job_id)
    values = read_settings(JobPlan, doc, where, defaults={"join_timeout_s": default_join_timeout_s})
    distill = distill_from_table(doc["distill"], where, task=job.task) if "distill" in doc else None
    return JobPlan(
        job=job,
        datasets=_datasets(sec, job),
        models=_models(sec, job),
        factories={key: model.text(key) for key in FACTORY_KEYS if key in model.raw},
        distill=distill,
        where=where,
        **values,
    )


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


__all__ = ["TABLES", "JobPlan", "check_plan", "job_keys", "job_tables", "plan_from_document"]
