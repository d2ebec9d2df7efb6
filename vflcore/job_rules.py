"""The job's ``[job]`` table and the rules every ``JobSpec`` must meet: one place, for both sides.

``job_from_document`` reads a job file, the ``[job]`` table of a daemon's config or a document
submitted over the Control API. Each key's own rule sits in its declaration (``vflcore.job``) and
holds whoever builds the ``JobSpec``; ``validate_job`` checks the rules across keys. The
server checks each job at submission, and a passive party checks the job the server offers it
with the same function before it joins (``vflclient``), so a job no party can run is refused with
the same words on either side.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vflcore.errors import ConfigError
from vflcore.job import JobSpec
from vflcore.privacy import check_privacy, privacy_from_table
from vflcore.settings import Section, read_settings

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
    """Refuse settings no algorithm can run with, before any party joins: the rules across keys.

    Each key's own rule is its declaration's (``vflcore.job``), met when the ``JobSpec`` is made.
    """
    if not job.passive_parties:
        raise ConfigError(
            f"{where}: [job] passive_parties = []; list the passive parties' ids, each at least 2 "
            "(party 1 is the server)"
        )
    if job.patience and not job.validation_fraction:
        raise ConfigError(
            f"{where}: [job] patience = {job.patience} stops on the validation loss, but validation_fraction is 0; "
            "set validation_fraction (e.g. 0.1) or remove patience"
        )
    check_privacy(job.privacy, where, task=job.task)
