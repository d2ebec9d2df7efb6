"""The job's ``[job]`` table and the rules every ``JobSpec`` must meet: one place, for both sides.

``job_from_document`` reads a job file, the ``[job]`` table of a daemon's config or a document
submitted over the Control API; ``validate_job`` checks a ``JobSpec`` whoever built it. The
server checks each job at submission, and a passive party checks the job the server offers it
with the same function before it joins (``vflclient``), so a job no party can run is refused with
the same words on either side.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vflcore.errors import ConfigError
from vflcore.job import OPTIMIZERS, ROLES, TASKS, JobSpec, check_job_id
from vflcore.privacy import check_privacy, privacy_from_table
from vflcore.settings import Section, read_settings
from vflcore.wire.codecs import parse_codec

__all__ = ["job_from_document", "read_job", "validate_job"]


def job_from_document(doc: Mapping[str, Any], source: Path | str | None = None) -> JobSpec:
    """The ``[job]`` table, read field by field as ``JobSpec`` declares them, and checked (``validate_job``).

    ``source`` is the file the document came from (relative paths resolve against its folder),
    or a label for a document that has no file, such as a job submitted over the Control API.
    """
    job = read_job(doc, source)
    validate_job(job, Section(doc, "job", source).where)
    return job


def read_job(doc: Mapping[str, Any], source: Path | str | None = None) -> JobSpec:
    """The ``[job]``, ``[algorithm]`` and ``[privacy]`` tables as a ``JobSpec``, each value of its declared type.

    Not yet checked as a whole: for a reader that checks the job with the rest of its plan
    (``vflserver.training.job_plan``), so that each rule runs once.
    """
    where = Section(doc, "job", source).where
    options = Section(doc, "algorithm", source).raw
    privacy = privacy_from_table(doc.get("privacy", {}), where)
    return JobSpec(**read_settings(JobSpec, doc, source), algorithm_options=dict(options), privacy=privacy)


def validate_job(job: JobSpec, where: str = "config") -> None:
    """Refuse settings no algorithm can run with, before any party joins."""
    if job.job_id:  # empty: the server names the job
        try:
            check_job_id(job.job_id)
        except ValueError as exc:
            raise ConfigError(f"{where}: [job] job_id: {exc}") from None
    if job.task not in TASKS:
        raise ConfigError(f"{where}: [job] task = {job.task!r}; choose one of {list(TASKS)}")
    for prefix in ("", *(f"{role}_" for role in ROLES)):
        name = getattr(job, f"{prefix}optimizer")
        if name is not None and name.lower() not in OPTIMIZERS:
            raise ConfigError(f"{where}: [job] {prefix}optimizer = {name!r}; choose one of {list(OPTIMIZERS)}")
        lr = getattr(job, f"{prefix}learning_rate")
        if lr is not None and not lr > 0:
            raise ConfigError(f"{where}: [job] {prefix}learning_rate = {lr!r}; give a positive number")
        decay = getattr(job, f"{prefix}weight_decay")
        if decay is not None and not 0.0 <= decay < float("inf"):
            raise ConfigError(f"{where}: [job] {prefix}weight_decay must be zero or a positive number, got {decay}")
    for key in ("batch_size", "epochs", "embedding_dim"):
        if getattr(job, key) < 1:
            raise ConfigError(f"{where}: [job] {key} must be at least 1")
    if not 0.0 <= job.test_fraction < 1.0:
        raise ConfigError(f"{where}: [job] test_fraction must be in [0, 1)")
    if not 0.0 <= job.validation_fraction < 1.0:
        raise ConfigError(
            f"{where}: [job] validation_fraction = {job.validation_fraction}; give a share of the training rows "
            "in [0, 1), e.g. 0.1, or 0 for no validation"
        )
    if job.patience < 0:
        raise ConfigError(
            f"{where}: [job] patience = {job.patience}; give a number of epochs, or 0 to never stop early"
        )
    if job.patience and not job.validation_fraction:
        raise ConfigError(
            f"{where}: [job] patience = {job.patience} stops on the validation loss, but validation_fraction is 0; "
            "set validation_fraction (e.g. 0.1) or remove patience"
        )
    if job.eval_every_rounds < 0:
        raise ConfigError(
            f"{where}: [job] eval_every_rounds = {job.eval_every_rounds}; give a number of rounds, "
            "or 0 to score the test rows only at the end of each epoch"
        )
    if job.checkpoint_every_steps < 0:
        raise ConfigError(
            f"{where}: [job] checkpoint_every_steps = {job.checkpoint_every_steps}; give a number of steps, "
            "or 0 to checkpoint only at the end of each epoch"
        )
    for key in ("wire_codec", "wire_codec_up", "wire_codec_down"):
        value = getattr(job, key)
        if value or key == "wire_codec":
            try:
                parse_codec(value)
            except ValueError as exc:
                raise ConfigError(f"{where}: [job] {key} = {value!r}: {exc}") from None
    if not job.passive_parties or any(p < 2 for p in job.passive_parties):
        raise ConfigError(f"{where}: [job] passive_parties must list party ids >= 2 (party 1 is the server)")
    if len(set(job.passive_parties)) != len(job.passive_parties):
        raise ConfigError(f"{where}: [job] passive_parties lists a party twice")
    check_privacy(job.privacy, where, task=job.task)
