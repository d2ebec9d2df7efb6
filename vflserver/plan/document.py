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
    top_factory = "mymodels:top"  # "module:function" per model the algorithm takes (docs/reference/configuration.md)
    [serving]                     # enabled (serve the model once trained; default true), degraded
    [privacy]                     # the defences each party applies (vflcore.job.privacy; all off by default)
    [distill]                     # also train a student the active party serves alone (settings: docs)

The shared tables (``[job]``, ``[algorithm]``, ``[privacy]``, ``[distill]``) are read by
``vflcore.job``, one floor down; this module reads the active party's own (``[model]``,
``[serving]``, the dataset and model names) and refuses unknown tables and keys by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vflalgorithms.factories import FACTORY_KEYS
from vflcore.errors import ConfigError
from vflcore.job.distill import distill_from_table, distill_keys
from vflcore.job.document import read_job
from vflcore.job.privacy import privacy_keys
from vflcore.job.spec import ACTIVE_PARTY, JobSpec, settable_fields
from vflcore.runtime.config import DEFAULT_DATASET
from vflcore.settings import Section, Tables, read_settings, refuse_unknown_tables, table_keys
from vflserver.plan.job_plan import JobPlan

#: The tables of a job document; anything else is refused by name.
TABLES = ("job", "algorithm", "model", "serving", "privacy", "distill")
#: ``[job]`` keys that name each party's dataset and model (assembled into ``JobPlan.datasets``, ``.models``).
_NAME_KEYS = ("dataset", "datasets", "model", "models")


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


__all__ = ["TABLES", "job_keys", "job_tables", "plan_from_document"]
