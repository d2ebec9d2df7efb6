"""The plan: one job as the runner runs it and ``ActiveParty`` trains it, checked when it is made.

A plan is the shared ``JobSpec`` (``vflcore.job``) and what only the active party needs to run
it: each party's dataset and model names, the top model, serving, and the student
(``[distill]``). Every ``JobPlan`` is checked when it is made, from a document
(``vflserver.plan.document``) or in code, so a job that cannot run is refused at submission,
before it is queued, with a message that names the key; the active party trusts the plan it is
handed. Why on a floor of its own, below ``training``: the runner (``jobs``) and ``ActiveParty``
(``training``) both hold it. The checks that need the active party's table (its classes, its
feature columns) are made where the table is read: ``vflserver.plan.admission``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vflalgorithms.factories import refuse_untaken
from vflalgorithms.label_protection import check_privacy_applies
from vflalgorithms.registry import algorithm_spec
from vflcore.errors import ConfigError
from vflcore.job.distill import DistillSpec
from vflcore.job.rules import validate_job
from vflcore.job.spec import JobSpec
from vflcore.settings import check_declared, one_of, positive, setting, within
from vflserver.inference.config import DEGRADED_MODES

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


__all__ = ["JobPlan", "check_plan"]
