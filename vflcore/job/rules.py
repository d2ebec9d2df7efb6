"""The rules every ``JobSpec`` must meet across its keys: one function, for both sides of the wire.

Each key's own rule sits in its declaration (``vflcore.job.spec``) and holds whoever builds the
``JobSpec``; ``validate_job`` checks the rules across keys. The server checks each job at
submission (``vflserver.plan.job_plan.check_plan``), and a passive party checks the job the server
offers it with the same function before it joins (``vflclient``), so a job no party can run is
refused with the same words on either side.
"""

from __future__ import annotations

from vflcore.errors import ConfigError
from vflcore.job.privacy import check_privacy
from vflcore.job.spec import JobSpec

__all__ = ["validate_job"]


def validate_job(job: JobSpec, where: str = "config") -> None:
    """Refuse settings no algorithm can run with, before any party joins: the rules across keys.

    Each key's own rule is its declaration's (``vflcore.job.spec``), met when the ``JobSpec`` is made.
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
