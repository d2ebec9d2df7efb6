"""A job's ``[distill]`` table: whether the active party distils the federated model into a student, and how.

A job with this table (even an empty one) trains, after the federated model, a **student** on
the active party's own features alone, taught by the federated model's outputs on the training
rows (``vflserver.training.distillation``). The student serves with every passive party offline,
as an APFed model does. No passive party reads these settings, so they are not part of
``JobSpec`` and never cross the wire; they sit with the job's other tables all the same, so that
a job document is read on one floor (``vflserver.plan.document`` reads it from here).

Every value is checked when the job is submitted; a ConfigError names the key. The student
factory is imported and probed with the active party's table (``vflserver.plan.admission``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from vflcore.errors import ConfigError
from vflcore.settings import (
    Section,
    above,
    check_declared,
    read_settings,
    refuse_unknown,
    setting,
    table_keys,
    whole,
    within,
)

#: The ``[distill]`` key of the student's own factory, and the factories key the student's context uses.
STUDENT_FACTORY = "student_factory"
#: What the served student's name adds to its job's id: job ``credit`` serves ``credit-student``.
STUDENT_SUFFIX = "-student"


def _factory(value: Any) -> str | None:
    """Empty (the default student), or ``module:function``; whether it imports is checked with the data."""
    if isinstance(value, str) and (not value or ":" in value):
        return None
    return "; give 'package.module:function' building the student from (num_features, num_outputs)"


@dataclass(frozen=True)
class DistillSpec:
    """How the student learns; the defaults are the usual ones of knowledge distillation (Hinton et al., 2015)."""

    #: Softens both models' class probabilities before they are compared (classification only):
    #: above 1, the teacher's ranking of the wrong classes carries more weight.
    temperature: float = field(
        default=2.0, metadata=setting("distill", check=above(0, "give a number above 0 (1: no softening)"))
    )
    #: The weight of the true labels in the student's loss, in [0, 1]; the teacher's outputs get
    #: the rest. 1 trains on the labels alone (no teacher); 0 on the teacher alone.
    label_weight: float = field(
        default=0.5,
        metadata=setting(
            "distill",
            check=within(
                0, 1, "give a weight in [0, 1] (1: the true labels alone, 0: the teacher alone)", high_included=True
            ),
        ),
    )
    #: Passes over the training rows (0: as many as the job's ``[job] epochs``).
    epochs: int = field(
        default=0, metadata=setting("distill", check=whole(0, "a whole number of epochs (0: the job's)"))
    )
    #: ``module:function`` building the student: ``factory(num_features, num_outputs) -> nn.Module``.
    #: Empty: the active party's default, an MLP encoder (``bottom_hidden`` → ``embedding_dim``)
    #: then an MLP head (``[model] top_hidden``, ``top_dropout``), as APFed's active model.
    student_factory: str = field(default="", metadata=setting("distill", check=_factory))

    def __post_init__(self) -> None:
        check_declared(self)

    def student_epochs(self, job_epochs: int) -> int:
        """The student's epochs: its own, or the job's when the table leaves them at 0."""
        return self.epochs or job_epochs

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def student_name(job_id: str) -> str:
    """The name the student of job ``job_id`` is served and exported under."""
    return f"{job_id}{STUDENT_SUFFIX}"


def refuse_student_names(job_id: str, where: str = "job") -> None:
    """ConfigError if ``job_id`` ends like a student's name: its model would replace another job's student.

    Why reserved: the endpoint serves models by name, and a job called ``credit-student`` would
    take the name that job ``credit``'s student is served under (or lose it to that student).
    """
    if job_id.endswith(STUDENT_SUFFIX):
        raise ConfigError(
            f"{where}: [job] job_id = {job_id!r} ends in {STUDENT_SUFFIX!r}, which names distilled students "
            f"(job X's student is served as X{STUDENT_SUFFIX}); choose another ID"
        )


def distill_keys() -> tuple[str, ...]:
    """Every key ``[distill]`` may hold."""
    return table_keys(DistillSpec, "distill")


def distill_from_table(table: Any, where: str = "job", *, task: str = "classification") -> DistillSpec:
    """``[distill]`` checked and completed with the defaults; a ConfigError names the key at fault.

    The student factory is only checked for its form here; ``vflserver.plan.admission.check_models``
    imports and probes it once the active party's table gives the shapes.
    """
    sec = Section({"distill": table}, "distill", where)
    refuse_unknown(sec, distill_keys())
    spec = DistillSpec(**read_settings(DistillSpec, {"distill": table}, where))
    if task != "classification" and "temperature" in table:
        raise ConfigError(
            f"{where}: [distill] temperature softens class probabilities; a {task} job has none (remove it)"
        )
    return spec


__all__ = [
    "STUDENT_FACTORY",
    "STUDENT_SUFFIX",
    "DistillSpec",
    "distill_from_table",
    "distill_keys",
    "refuse_student_names",
    "student_name",
]
