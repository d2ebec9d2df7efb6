"""A job document's shared tables read into a ``JobSpec``: ``[job]``, ``[algorithm]``, ``[privacy]``.

``job_from_document`` reads a job file, the ``[job]`` table of a daemon's config or a document
submitted over the Control API, and checks it (``vflcore.job.rules``). The tables only the active
party reads (``[model]``, ``[serving]``, the names of each party's dataset and model) are its
plan's (``vflserver.plan``); ``[distill]`` is read beside them, by ``vflcore.job.distill``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vflcore.job.privacy import privacy_from_table
from vflcore.job.rules import validate_job
from vflcore.job.spec import JobSpec
from vflcore.settings import Section, read_settings

__all__ = ["job_from_document", "read_job"]


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
    (``vflserver.plan.job_plan``), so that each rule runs once.
    """
    where = Section(doc, "job", source).where
    options = Section(doc, "algorithm", source).raw
    privacy = privacy_from_table(doc.get("privacy", {}), where)
    return JobSpec(**read_settings(JobSpec, doc, source), algorithm_options=dict(options), privacy=privacy)
