"""The rules a job's settings must meet before any party joins: one place, for job files and the Control API.

Why apart from ``vflcore.runtime.config``: they are about a ``JobSpec``, whoever built it (a
job file, the ``[job]`` table of a daemon's config, a document submitted over the Control API),
and they need nothing of how a config file is read.
"""

from __future__ import annotations

from vflcore.errors import ConfigError
from vflcore.job import OPTIMIZERS, TASKS, JobSpec, check_job_id
from vflcore.privacy import check_privacy
from vflcore.wire.codecs import parse_codec

__all__ = ["validate_job"]


def validate_job(job: JobSpec, where: str = "config") -> None:
    """Refuse settings no algorithm can run with, before any party joins."""
    if job.job_id:  # empty: the server names the job
        try:
            check_job_id(job.job_id)
        except ValueError as exc:
            raise ConfigError(f"{where}: [job] job_id: {exc}") from None
    if job.task not in TASKS:
        raise ConfigError(f"{where}: [job] task = {job.task!r}; choose one of {list(TASKS)}")
    if job.optimizer.lower() not in OPTIMIZERS:
        raise ConfigError(f"{where}: [job] optimizer = {job.optimizer!r}; choose one of {list(OPTIMIZERS)}")
    for key in ("batch_size", "epochs", "embedding_dim"):
        if getattr(job, key) < 1:
            raise ConfigError(f"{where}: [job] {key} must be at least 1")
    if not 0.0 <= job.test_fraction < 1.0:
        raise ConfigError(f"{where}: [job] test_fraction must be in [0, 1)")
    if job.learning_rate <= 0:
        raise ConfigError(f"{where}: [job] learning_rate must be positive")
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
    if not 0.0 <= job.weight_decay < float("inf"):
        raise ConfigError(f"{where}: [job] weight_decay must be zero or a positive number, got {job.weight_decay}")
    if not job.passive_parties or any(p < 2 for p in job.passive_parties):
        raise ConfigError(f"{where}: [job] passive_parties must list party ids >= 2 (party 1 is the server)")
    if len(set(job.passive_parties)) != len(job.passive_parties):
        raise ConfigError(f"{where}: [job] passive_parties lists a party twice")
    check_privacy(job.privacy, where, task=job.task)
