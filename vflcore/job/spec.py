"""The job: the settings every party of one training run must share.

The server's config decides them; a passive party learns them when it joins. Keeping them in
one frozen dataclass means the schedule (row split, batches, model seeds: ``vflcore.job.schedule``)
is derived from the same numbers on every party, so no party has to tell another which rows it is
working on. Each key's own rule sits in its declaration and holds however a ``JobSpec`` is built;
the rules across keys are ``vflcore.job.rules``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import Field, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from vflcore.job.privacy import PrivacySpec
from vflcore.job.schedule import Schedule
from vflcore.settings import Check, above, at_least, check_declared, declared, one_of, optional, setting, whole, within

#: The learning tasks of ``[job] task`` (not the work items of ``vflcore.work_items``).
TASKS = ("classification", "regression")
#: The optimizers every party can build (``vflcore.ml.optimizers.make_optimizer``): "sgd" carries
#: momentum 0.9, "plain_sgd" none (what the VIM authors give the server and its heads).
OPTIMIZERS = ("adam", "sgd", "plain_sgd")
#: The roles a job's models play, each with an optimizer of its own if the job says so
#: (``[job] top_optimizer`` ...): "top", the active party's top model and the VIM heads, wherever
#: they live; "bottom", every party's bottom model (encoders, feature extractors, decoders).
ROLES = ("top", "bottom")

#: The active party (labels, server) is party 1; passive parties are 2, 3, ...
ACTIVE_PARTY = 1

#: A job id names folders on every party (``<run_dir>/<job_id>/``) and the job's Triton model, so it
#: is a plain name: no ``/``, no leading dot, nothing a file system or a URL reads differently.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_job_id(job_id: str) -> str:
    """``job_id`` if it is a usable job id, else ValueError saying what one looks like."""
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(
            f"job id {job_id!r} is not allowed: use 1 to 128 letters, digits, '_', '.' or '-', starting with a "
            "letter or digit (it names folders and the served model)"
        )
    return job_id


def new_job_id() -> str:
    """The id of a job submitted without one: when it was named, and six random hex digits."""
    return f"job-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


#: The codecs a job's ``wire_codec`` keys may name; ``vflcore.wire.codecs`` builds each. The names
#: are the job's, a floor below the wire, so that a ``JobSpec`` built in code meets the rule too.
FIXED_CODECS = ("fp32", "bf16", "fp16", "int8")
CODEC_NAMES = (*FIXED_CODECS, "topk:<fraction>")


def topk_fraction(name: str) -> float | None:
    """The fraction of a ``topk:<fraction>`` codec name, if it is one and the fraction is in (0, 1]."""
    kind, colon, value = name.partition(":")
    if kind != "topk" or not colon:
        return None
    try:
        fraction = float(value)
    except ValueError:
        return None
    return fraction if 0 < fraction <= 1 else None


def codec_refusal(name: Any) -> str | None:
    """Why ``name`` is no codec (listing the choices), or None if it is one."""
    if isinstance(name, str) and (name in FIXED_CODECS or topk_fraction(name) is not None):
        return None
    return f"wire codec {name!r} is not one of {', '.join(CODEC_NAMES)} (topk's fraction in (0, 1])"


#: A ``JobSpec`` field that ``[job]`` sets. The others are set by a table of their own
#: (``algorithm_options``: ``[algorithm]``; ``privacy``: ``[privacy]``), or by the active party
#: from its data (``num_rows``, ``num_outputs``).
_JOB = setting("job")


def _job(check: Check, unset: str = "") -> dict[str, Any]:
    """A ``[job]`` key with a rule of its own (``vflcore.settings``), met however the ``JobSpec`` is built."""
    return setting("job", check=check, unset=unset)


def _job_id(value: Any) -> str | None:
    """Empty (the server names the job), or a plain name (``check_job_id``)."""
    try:
        if value != "":
            check_job_id(value)
    except (ValueError, TypeError):
        return (
            "; use 1 to 128 letters, digits, '_', '.' or '-', starting with a letter or digit "
            "(it names folders and the served model)"
        )
    return None


def _optimizer(value: Any) -> str | None:
    """An optimizer every party can build, in any case ("Adam" is "adam")."""
    return None if isinstance(value, str) and value.lower() in OPTIMIZERS else f"; choose one of {list(OPTIMIZERS)}"


def _codec(value: Any) -> str | None:
    """A codec ``vflcore.wire.codecs`` can build (``codec_refusal``)."""
    why = codec_refusal(value)
    return None if why is None else f": {why}"


def _either_direction(value: Any) -> str | None:
    return None if value == "" else _codec(value)


def _parties(value: Any) -> str | None:
    """Passive party ids, each at least 2 (party 1 is the server), none twice.

    None at all is a job of the active party alone: an in-process reference (SingleVL) builds one,
    and a job submitted to the service is refused it (``validate_job``), as it federates nothing.
    """
    if not isinstance(value, tuple | list) or any(
        isinstance(p, bool) or not isinstance(p, int) or p < 2 for p in value
    ):
        return "; list the passive parties' ids, each at least 2 (party 1 is the server)"
    ids = tuple(value)
    if len(set(ids)) != len(ids):
        return "; it lists a party twice"
    return None


_AT_LEAST_ONE = _job(whole(1, "a whole number, at least 1"))
_RATE = above(0, "give a positive number")
_DECAY = at_least(0, "give zero or a positive number")


@dataclass(frozen=True)
class JobSpec:
    """Settings shared by every party of a job."""

    job_id: str = field(metadata=_job(_job_id))
    algorithm: str = field(default="splitnn", metadata=_JOB)
    task: str = field(default="classification", metadata=_job(one_of(TASKS)))
    seed: int = field(default=0, metadata=_JOB)
    batch_size: int = field(default=64, metadata=_AT_LEAST_ONE)
    epochs: int = field(default=10, metadata=_AT_LEAST_ONE)
    embedding_dim: int = field(default=16, metadata=_AT_LEAST_ONE)
    bottom_hidden: tuple[int, ...] = field(default=(64,), metadata=_JOB)
    optimizer: str = field(default="adam", metadata=_job(_optimizer))
    learning_rate: float = field(default=1e-3, metadata=_job(_RATE))
    #: The L2 penalty every party's optimizer adds to its gradients (0: none).
    weight_decay: float = field(default=0.0, metadata=_job(_DECAY))
    #: The optimizer, learning rate and weight decay of one role's models (``ROLES``), where they
    #: differ from the job's own three above (None: as those). The VIM authors, for one, give the
    #: server and heads plain SGD and the parties' bottoms SGD with momentum (``optimizer_for``).
    top_optimizer: str | None = field(default=None, metadata=_job(optional(_optimizer), "as `optimizer`"))
    top_learning_rate: float | None = field(default=None, metadata=_job(optional(_RATE), "as `learning_rate`"))
    top_weight_decay: float | None = field(default=None, metadata=_job(optional(_DECAY), "as `weight_decay`"))
    bottom_optimizer: str | None = field(default=None, metadata=_job(optional(_optimizer), "as `optimizer`"))
    bottom_learning_rate: float | None = field(default=None, metadata=_job(optional(_RATE), "as `learning_rate`"))
    bottom_weight_decay: float | None = field(default=None, metadata=_job(optional(_DECAY), "as `weight_decay`"))
    test_fraction: float = field(
        default=0.2, metadata=_job(within(0, 1, "give a share of the aligned rows in [0, 1), e.g. 0.2"))
    )
    #: The share of the training rows set aside to choose the best epoch by (0: none). With it, every
    #: epoch is also scored on them, and the weights of the epoch with the lowest validation loss are
    #: kept, served and named in ``summary.json`` (``best_epoch``), not merely the last epoch's.
    validation_fraction: float = field(
        default=0.0,
        metadata=_job(within(0, 1, "give a share of the training rows in [0, 1), e.g. 0.1, or 0 for no validation")),
    )
    #: Stop training once the validation loss has not improved for this many epochs (0: train every
    #: epoch). Needs ``validation_fraction``.
    patience: int = field(default=0, metadata=_job(whole(0, "a number of epochs, or 0 to never stop early")))
    #: Also score the held-out test rows after every this many training steps (rounds) inside an
    #: epoch (0: at the end of each epoch only), so that "rounds to 95 %" is measured by the round.
    eval_every_rounds: int = field(
        default=0,
        metadata=_job(whole(0, "a number of rounds, or 0 to score the test rows only at the end of each epoch")),
    )
    num_rows: int = 0
    passive_parties: tuple[int, ...] = field(default=(2, 3), metadata=_job(_parties))
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    #: The model's output width (classes, or 1 for regression); the active party sets it from its
    #: label column, for algorithms whose passive parties hold a head of their own (VIMADMM-J).
    num_outputs: int = 0
    #: Also checkpoint every this many training steps (batches), not only at each epoch's end
    #: (0: epochs only). A resumed job then replays at most this many steps.
    checkpoint_every_steps: int = field(
        default=0, metadata=_job(whole(0, "a number of steps, or 0 to checkpoint only at the end of each epoch"))
    )
    #: How the tensors of a training step are encoded on the wire (``vflcore.wire.codecs``):
    #: "fp32" (exact), "bf16", "fp16", "int8" or "topk:<fraction>"; per direction, the two below
    #: override it ("": as ``wire_codec``). Up is what passive parties send, down what they get.
    wire_codec: str = field(default="fp32", metadata=_job(_codec))
    wire_codec_up: str = field(default="", metadata=_job(_either_direction))
    wire_codec_down: str = field(default="", metadata=_job(_either_direction))
    #: The defences each party applies to what it sends (``[privacy]``, ``vflcore.job.privacy``); all off by default.
    privacy: PrivacySpec = field(default_factory=PrivacySpec)

    # The fields above are the only list of the job's settings. The wire (``vflcore.wire.serde``)
    # and the config file (``vflcore.runtime.config``) both walk them, so a new setting is a new
    # field here, in ``JobSpec`` of ``federation.proto`` (same name) and in docs/reference/configuration.md.

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def serves_best_epoch(self) -> bool:
        """Whether the model served is the best epoch's by validation loss, which every party loads at the
        end (``Restore(serve)``), rather than the last epoch's: the rule both sides of the wire follow."""
        return bool(self.validation_fraction)

    def optimizer_for(self, role: str) -> OptimizerChoice:
        """The optimizer, learning rate and weight decay of ``role``'s models: its own keys, else the job's."""
        if role not in ROLES:
            raise ValueError(f"unknown model role {role!r}; the roles are {', '.join(ROLES)}")
        name, lr, decay = (getattr(self, f"{role}_{key}") for key in ("optimizer", "learning_rate", "weight_decay"))
        return OptimizerChoice(
            self.optimizer if name is None else name,
            self.learning_rate if lr is None else lr,
            self.weight_decay if decay is None else decay,
        )

    def options_json(self) -> str:
        """Algorithm options as JSON: the only encoding that crosses the wire."""
        return json.dumps(self.algorithm_options, sort_keys=True)

    def schedule(self, held_out: np.ndarray | None = None) -> Schedule:
        """The row split and batch order: derived from the seed alone, or around ``held_out`` test rows."""
        return Schedule(self, held_out)


def settable_fields() -> tuple[Field[Any], ...]:
    """The ``JobSpec`` fields a ``[job]`` table sets, each read by its type (``vflcore.settings``)."""
    return declared(JobSpec, "job")


class OptimizerChoice(NamedTuple):
    """What one role's models are trained with (``JobSpec.optimizer_for``)."""

    name: str
    learning_rate: float
    weight_decay: float


class Offer(NamedTuple):
    """A job offered to one passive party: the job, and which of its own dataset and model to use.

    ``dataset`` and ``model`` are names in that party's own config (``[datasets]``, ``[models]``);
    the job says which name each party uses, and the party alone knows what each name stands for.
    An empty ``model`` means the party's default (``[model] factory``, or the job's MLP).
    """

    job: JobSpec
    dataset: str
    model: str = ""
