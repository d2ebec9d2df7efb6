"""The job: the settings every party of one training run must share.

The server's config decides them; a passive party learns them when it joins. Keeping them in
one frozen dataclass means the schedule (row split, batches, model seeds) is derived from the
same numbers on every party, so no party has to tell another which rows it is working on.

The schedule: parties hold the same aligned rows in the same order and the same job seed, so
seeding NumPy's generator with the seed (and epoch) gives each party the same split and the same
batches. Nothing depends on process state, which is what makes the agreement hold across machines.
The one exception is a test set the active party's dataset names (``held_out_ids``): it tells
the passive parties those rows' positions (``HoldOut``), and the rest follows from the seed again.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import Field, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from vflcore.privacy import PrivacySpec
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
    #: The defences each party applies to what it sends (``[privacy]``, ``vflcore.privacy``); all off by default.
    privacy: PrivacySpec = field(default_factory=PrivacySpec)

    # The fields above are the only list of the job's settings. The wire (``vflcore.wire.serde``)
    # and the config file (``vflcore.runtime.config``) both walk them, so a new setting is a new
    # field here, in ``JobSpec`` of ``federation.proto`` (same name) and in docs/configuration.md.

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


class Position(NamedTuple):
    """Where training continues: the next step is batch ``batch`` of epoch ``epoch`` (both from 0).

    A checkpoint is named by the position it resumes at. The end of epoch e is ``Position(e + 1, 0)``
    (``after_epoch``); a checkpoint taken after s batches of epoch e is ``Position(e, s)``; a job
    that starts afresh starts at ``Position(0, 0)``. Positions compare in training order.
    """

    epoch: int
    batch: int = 0

    @classmethod
    def after_epoch(cls, epoch: int) -> Position:
        return cls(epoch + 1, 0)

    def __str__(self) -> str:
        """Counted from 1, as users read epochs: "the end of epoch 3", "epoch 4 after 20 batches"."""
        if self.batch == 0:
            return "the start" if self.epoch == 0 else f"the end of epoch {self.epoch}"
        return f"epoch {self.epoch + 1} after {self.batch} batches"


def mid_epoch_checkpoint_due(job: JobSpec, epoch: int, done: int, per_epoch: int) -> bool:
    """Whether ``done`` batches into ``epoch`` is a ``checkpoint_every_steps`` boundary inside the epoch.

    Every party asks the same question after the same step, so all of them save the same
    positions without telling each other; the epoch's end is saved anyway, so it is not due here.
    """
    return _due_inside(job.checkpoint_every_steps, epoch, done, per_epoch)


def round_score_due(job: JobSpec, epoch: int, done: int, per_epoch: int) -> bool:
    """Whether ``done`` batches into ``epoch`` is an ``eval_every_rounds`` boundary inside the epoch.

    As with the checkpoints, every party asks after the same step: each passive party then sends
    its representation of the test rows, and the active party scores them. The epoch's end is
    scored anyway, so it is not due here.
    """
    return _due_inside(job.eval_every_rounds, epoch, done, per_epoch)


def _due_inside(every: int, epoch: int, done: int, per_epoch: int) -> bool:
    """Whether the job's step count after ``done`` batches of ``epoch`` is a multiple of ``every``, inside the epoch."""
    return every > 0 and 0 < done < per_epoch and (epoch * per_epoch + done) % every == 0


def model_seed(job_seed: int, party: int, part: str) -> int:
    """Seed of one model part of one party: distinct per part, equal across runs and processes."""
    offsets = {"bottom": 0, "top": 1, "head": 2, "dropout": 3, "student": 4}
    return int(job_seed) * 1009 + party * 17 + offsets[part]


class Schedule:
    """Which aligned rows train, which are held out to test and to validate, and the batches of every epoch.

    The test rows are the job's seeded ``test_fraction``, or the rows the active party's dataset
    names (``held_out``: its ``held_out_ids`` file, sent to every party as ``HoldOut``). The
    validation rows are a seeded ``validation_fraction`` of the rest; they never train.
    """

    def __init__(self, job: JobSpec, held_out: np.ndarray | None = None) -> None:
        self.job = job
        if held_out is None:
            train_rows, self.test_rows = split_rows(job.num_rows, job.test_fraction, job.seed)
        else:
            train_rows, self.test_rows = rows_around(job.num_rows, held_out)
        self.train_rows, self.valid_rows = validation_rows(train_rows, job.validation_fraction, job.seed)
        #: Whether the test rows were given (``held_out``) rather than drawn by the seed.
        self.given = held_out is not None

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The batches of one epoch, identical on every party."""
        return epoch_batches(self.train_rows, self.job.batch_size, self.job.seed, epoch)


def epoch_mean(
    batches: Iterable[np.ndarray], step: Callable[[np.ndarray], float], losses: list[float] | None = None
) -> float:
    """Run ``step`` on each batch of rows, append each loss to ``losses``; the row-weighted mean loss.

    The loop every algorithm's epoch shares, in the daemons and in the in-process references.
    """
    total, count = 0.0, 0
    for rows in batches:
        value = step(rows)
        if losses is not None:
            losses.append(value)
        total, count = total + value * len(rows), count + len(rows)
    return total / max(1, count)


def split_rows(num_rows: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Split row indices into (train_rows, test_rows), each sorted ascending, as int64 arrays.

    The test rows are the first round(num_rows * test_fraction) entries of a seeded permutation;
    sorting each part keeps row access in file order, which is cheaper and easier to inspect.
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be at least 1, got {num_rows}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    num_test = round(num_rows * test_fraction)
    if num_rows - num_test < 1:
        raise ValueError(
            f"test_fraction {test_fraction} leaves no training rows out of {num_rows}; lower test_fraction"
        )
    permutation = np.random.default_rng(seed).permutation(num_rows).astype(np.int64)
    test_rows = np.sort(permutation[:num_test])
    train_rows = np.sort(permutation[num_test:])
    return train_rows, test_rows


def rows_around(num_rows: int, held_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(train_rows, test_rows) when the test rows are given: ``held_out``, and every other row trains."""
    test_rows = np.unique(np.asarray(held_out, dtype=np.int64))
    if len(test_rows) and (test_rows[0] < 0 or test_rows[-1] >= num_rows):
        raise ValueError(f"held-out rows must be positions among the {num_rows} aligned rows")
    if len(test_rows) >= num_rows:
        raise ValueError(f"all {num_rows} aligned rows are held out, none is left to train on")
    mask = np.ones(num_rows, dtype=bool)
    mask[test_rows] = False
    return np.flatnonzero(mask).astype(np.int64), test_rows


def validation_rows(train_rows: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_rows, valid_rows): a seeded ``fraction`` of ``train_rows`` set aside, each part sorted.

    At least one row when ``fraction`` > 0, and at least one row left to train on. Seeded apart
    from the test split ([seed, 1]), so a job's test rows stay the same with or without validation.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return train_rows, np.empty(0, dtype=np.int64)
    count = max(1, round(len(train_rows) * fraction))
    if len(train_rows) - count < 1:
        raise ValueError(f"validation_fraction {fraction} leaves no training rows out of {len(train_rows)}; lower it")
    permutation = np.random.default_rng([seed, 1]).permutation(len(train_rows))
    valid = np.sort(train_rows[permutation[:count]])
    train = np.sort(train_rows[permutation[count:]])
    return train, valid


def epoch_batches(train_rows: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Shuffle train_rows for this epoch and cut them into batches; the last batch may be smaller.

    Seeding with [seed, epoch] gives each epoch its own order that any party can recompute
    independently, e.g. after a restart, without replaying earlier epochs.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if epoch < 0:
        raise ValueError(f"epoch must be non-negative, got {epoch}")
    shuffled = np.random.default_rng([seed, epoch]).permutation(np.asarray(train_rows, dtype=np.int64))
    return [shuffled[start : start + batch_size] for start in range(0, len(shuffled), batch_size)]
