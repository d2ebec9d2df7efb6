"""What every algorithm provides, what each party gives it, and the registry that finds them.

An algorithm is one folder under ``vflalgorithms/``. Its ``spec.py`` registers an
``AlgorithmSpec``: the name ``[job] algorithm`` uses, the two halves, the in-process reference
and its options (defaults and checks). The daemons only call the methods below and never branch
on an algorithm's name, so adding an algorithm adds a folder and nothing else.

Discovery: ``algorithm_spec(name)`` imports ``vflalgorithms.<folder>.spec`` for every folder
the first time it is called. Code outside this package (a plugin, a test) registers its own
spec by calling ``register`` when it is imported.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from vflalgorithms.factories import ModelSlot
from vflcore.errors import ConfigError, check_finite
from vflcore.job.schedule import Schedule
from vflcore.job.spec import JobSpec
from vflcore.ml.models import build_seeded
from vflcore.ml.onnx_export import OnnxPart
from vflcore.ml.state import capture, restore
from vflcore.wire.links import TrainingLink
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Task

# ---- the active party's half ------------------------------------------------------------------

#: Leaves each passive party of a round its answer: named tensors per party, in party order.
Publish = Callable[[list[dict[str, torch.Tensor]]], None]

#: Called by a half after each training step: (epoch, batches of it done, batches per epoch).
#: The party saves a checkpoint there when ``[job] checkpoint_every_steps`` says one is due.
AfterStep = Callable[[int, int, int], None]


def _no_checkpoints(epoch: int, done: int, per_epoch: int) -> None:
    """A half run outside a party (a test, a reference): nothing to save."""


class PassivePartiesView(Protocol):
    """What an algorithm's active half may do with the passive parties (``vflserver.federation.passive_parties``)."""

    def dispatch(self, make_task: Callable[[int], Task], *, parties: Iterable[int] | None = None) -> None: ...

    def expect(
        self,
        name: str,
        round_: int,
        batch: int,
        shape: tuple[int, ...],
        dtype: str = "float32",
        *,
        party: int | None = None,
    ) -> None: ...

    def gather(
        self, name: str, round_: int, batch: int, *, timeout_s: float | None = None
    ) -> dict[int, np.ndarray]: ...

    def next_arrival(
        self, name: str, round_: int, *, timeout_s: float | None = None
    ) -> tuple[int, int, np.ndarray]: ...

    def forget(self, name: str, round_: int, batch: int) -> None: ...

    def publish(self, party: int, key: TensorKey, array: np.ndarray, *, exact: bool = False) -> None: ...


class _OnDevice:
    """What both contexts share: the party's ``[compute] device``, and arrays from the wire moved there."""

    device: torch.device

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """A float32 array from the wire, as a tensor on this party's device (copied: wire buffers are read-only)."""
        return torch.from_numpy(np.array(array, dtype=np.float32)).to(self.device)


@dataclass
class ActiveContext(_OnDevice):
    """The active party's own data and its link to the passive parties, for one job."""

    job: JobSpec
    schedule: Schedule
    parties: PassivePartiesView
    features: torch.Tensor  # aligned rows x own features (may have 0 columns)
    labels: torch.Tensor  # int64 class ids, or float32 (n, 1) targets for regression
    num_outputs: int
    top_hidden: tuple[int, ...]
    #: Dropout after each hidden layer of the active party's MLP top (``[model] top_dropout``).
    top_dropout: float = 0.0
    after_step: AfterStep = _no_checkpoints
    #: The job's own model factories by ``[model]`` key (``vflalgorithms.factories``), already imported.
    factories: Mapping[str, Callable[..., nn.Module]] = field(default_factory=dict)
    #: Where this party computes (``[compute] device``); ``features`` and ``labels`` are there already.
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    #: The active party's secret noise key (``vflprivacy.noise``) when the job's ``[privacy]``
    #: asks it for noise (a label defence, label DP, h^A's noise): drawn from it, never from the job's seed.
    privacy_key: bytes | None = None
    #: This party's job folder, where ``privacy.json`` counts what it releases (APFed's h^A).
    folder: Path | None = None

    def model(self, key: str, default: Callable[..., nn.Module], args: tuple[int, ...], seed: int) -> nn.Module:
        """The model for factory ``key``: the job's own factory if it names one, else ``default``.

        Called with ``args``, built from ``seed`` (``build_seeded``) and moved to ``device``. A
        factory equivalent to the default (same layers, same widths) draws the same weights.
        """
        factory = self.factories.get(key, default)
        return build_seeded(lambda: factory(*args), seed).to(self.device)


class ServerAlgorithm(ABC):
    """The active party's half of a training algorithm."""

    #: The name used in ``[job] algorithm``.
    name: str

    def __init__(self, ctx: ActiveContext) -> None:
        self.ctx = ctx
        #: The training loss of every step, in order: what reference tests compare.
        self.step_losses: list[float] = []

    #: Called after every training step with its index over the whole job (from 0): the
    #: service's view of progress, e.g. when a resumed job takes its first step.
    on_step: Callable[[int], None] | None = None

    def epoch_loss(self, batches: list[np.ndarray]) -> float:
        """The row-weighted mean loss of an epoch of ``batches`` just trained, one step each.

        From the epoch's last ``len(batches)`` step losses, summed in batch order: the same
        numbers whether the epoch ran in one go or was resumed from a checkpoint inside it.
        """
        total = 0.0
        for rows, value in zip(batches, self.step_losses[-len(batches) :], strict=True):
            total += value * len(rows)
        return total / max(1, sum(len(rows) for rows in batches))

    def record_step(self, loss: float) -> float:
        """Keep one training step's loss (what reference tests compare), tell ``on_step``; returns the loss.

        A NaN or infinite loss is not kept: it raises TrainingDiverged (``check_loss``).
        """
        self.check_loss(loss)
        self.step_losses.append(loss)
        if self.on_step is not None:
            self.on_step(len(self.step_losses) - 1)
        return loss

    @staticmethod
    def check_loss(loss: float) -> None:
        """Raise TrainingDiverged if a step's training loss is NaN or infinite.

        ``record_step`` calls it; a half may call it sooner, before it sends the step's answers.
        """
        check_finite(loss, "the training loss")

    #: The ``[model]`` factories this algorithm takes (``vflalgorithms.factories``); the rest are refused.
    factory_keys: tuple[str, ...] = ()

    @classmethod
    def model_slots(cls, job: JobSpec, own_features: int, num_outputs: int) -> dict[str, ModelSlot]:
        """What each of ``factory_keys`` is called with and must return, for this job and data.

        A key missing here although it is in ``factory_keys`` builds nothing with this data (no
        own bottom model when the active party has no features).
        """
        return {}

    #: Whether ``predict`` needs each passive party's representation. APFed's does not: the
    #: active party evaluates and serves alone, and no party is asked for anything.
    needs_parties_to_predict = True
    #: Whether the active party must hold features of its own (APFed: it predicts from them alone).
    needs_own_features = False
    #: The per-row tensors of a passive party's answer that are functions of the labels, by wire
    #: name: what ``[privacy] label_defence`` perturbs (``vflalgorithms.label_protection``). The
    #: SplitNN family sends ∂L/∂h^k; VIMADMM and VIMADMM-J send the duals λ_B and the residual
    #: s^k_B. A job that asks for a label defence on an algorithm with none is refused at submission.
    label_defended: tuple[str, ...] = ()
    #: The wire name of the active party's own per-row embedding, if the algorithm sends it to the
    #: passive parties (APFed's h^A): what ``[privacy] active_embedding_clip`` clips and noises.
    active_embedding: str | None = None
    #: What protects this algorithm's labels when ``label_defence`` cannot: the refusal says it.
    label_defence_instead = "protect the labels with label_dp_epsilon"

    @property
    def upload_width(self) -> int:
        """Columns of what a passive party uploads per row: its embedding, or (VIMADMM-J) its logits."""
        return self.ctx.job.embedding_dim

    #: Whether the halves can resume inside an epoch (``train_epoch``'s ``first_batch``), and so
    #: take ``[job] checkpoint_every_steps``. Every algorithm here can; an algorithm added from
    #: outside must say so, and is refused the key at submission until it does.
    resumes_mid_epoch = False
    #: Whether the test rows can be scored inside an epoch (``[job] eval_every_rounds``): every
    #: passive half calls ``after_step`` after the same steps as this half. Not AdptVFedConv's,
    #: whose server trains alone in phase 3; an algorithm added from outside must say so.
    scores_inside_epoch = False

    @property
    def parties_in_step(self) -> bool:
        """Whether the passive parties take part in the steps being trained now.

        If they do, each party saves the checkpoints inside an epoch by itself, after the same
        steps (``AfterStep``). If not (AdptVFedConv's server trains its classifier alone), the
        active party tells them when to save (``Checkpoint``); their state does not change then.
        """
        return True

    @abstractmethod
    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        """Run one epoch with every passive party, from batch ``first_batch``; return the epoch's mean training loss.

        ``first_batch`` > 0 only when ``resumes_mid_epoch``: the steps before it are restored from a
        checkpoint, and their losses are the last ``first_batch`` of ``step_losses``.
        """

    @abstractmethod
    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        """The trained model's raw output (logits, or values) for rows of the active party's ``features``.

        ``uploads`` holds each passive party's representation of the same rows (none if
        ``needs_parties_to_predict`` is false). Pure tensor code in eval mode: ``predict`` serves
        it, and the ONNX export traces it (``onnx_part``).
        """

    @abstractmethod
    def eval(self) -> None:
        """Put every model into eval mode (dropout off) before ``infer``; each half names its models."""

    @torch.no_grad()
    def predict(self, rows: np.ndarray, embeddings: dict[int, np.ndarray]) -> torch.Tensor:
        """The model's output for aligned ``rows``, given each passive party's representation (on the CPU)."""
        self.eval()
        uploads = {p: self.ctx.tensor(embeddings[p]) for p in sorted(embeddings)}
        return self.infer(self.ctx.features[rows], uploads).cpu()

    def onnx_part(
        self, rows: np.ndarray, outputs: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], names: tuple[str, ...]
    ) -> OnnxPart:
        """The trained model as an ONNX export, probed on the active party's ``rows``.

        Inputs: ``features`` (if the active party has any) and ``party_<k>`` for every passive
        party whose representation ``infer`` takes, in party order, probed with seeded noise;
        ``outputs`` turns the raw output into the outputs ``names`` lists (probabilities and
        label, or the prediction), so the graph answers what the inference endpoint answers.
        """
        self.eval()
        ctx = self.ctx
        inputs: dict[str, torch.Tensor] = {}
        if ctx.features.shape[1]:
            inputs["features"] = ctx.features[rows]
        parties = list(ctx.job.passive_parties) if self.needs_parties_to_predict else []
        generator = torch.Generator().manual_seed(0)
        for party in parties:
            probe = torch.randn(len(rows), self.upload_width, generator=generator)
            inputs[f"party_{party}"] = probe.to(ctx.device)
        own = "features" in inputs

        def forward(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            features = tensors[0] if own else ctx.features[:0]  # no columns: ``infer`` does not read it
            uploads = dict(zip(parties, tensors[1:] if own else tensors, strict=True))
            return outputs(self.infer(features, uploads))

        return OnnxPart(forward, inputs, names, modules=_modules(self, self.checkpointed))

    #: The attributes that hold this half's training state (``vflcore.ml.state``): models,
    #: optimizers, generators and the algorithm's own variables. A resumed job reloads exactly
    #: these, so an attribute that changes during training and is missing here breaks resumption.
    checkpointed: tuple[str, ...] = ("step_losses",)

    def state(self) -> dict[str, Any]:
        """Everything ``checkpointed`` names, for the active party's checkpoint."""
        return capture(self, self.checkpointed)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``state()``), as if training had never stopped."""
        restore(self, state, self.checkpointed)

    def privacy_releases(self) -> dict[str, object] | None:
        """What the active party released under its own noise, with ε, for ``summary.json`` (APFed's h^A)."""
        return None

    def client_importance(self) -> dict[int, float] | None:
        """How much the trained model relies on each party, if the algorithm can tell (VIM: ‖W_k‖)."""
        return None


# ---- a passive party's half -------------------------------------------------------------------

#: Builds a party's own bottom model: ``factory(num_features, embedding_dim) -> nn.Module``.
ModelFactory = Callable[[int, int], nn.Module]


@dataclass
class PassiveContext(_OnDevice):
    """One passive party's data, model factory and link to the server, for one job."""

    party: int
    job: JobSpec
    schedule: Schedule
    features: torch.Tensor  # aligned rows x this party's features
    link: TrainingLink
    model_factory: ModelFactory | None = None
    after_step: AfterStep = _no_checkpoints
    #: Where this party computes (``[compute] device``); ``features`` is there already.
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


class ClientAlgorithm(ABC):
    """A passive party's half of a training algorithm."""

    name: str

    def __init__(self, ctx: PassiveContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        """Take part in one epoch, following the shared batch schedule from batch ``first_batch``."""

    @abstractmethod
    def represent(self, features: torch.Tensor) -> torch.Tensor:
        """This party's representation of rows of its ``features``, in eval mode: what it uploads to predict.

        Pure tensor code: ``embed`` serves it, and the ONNX export traces it (``onnx_part``).
        """

    @abstractmethod
    def eval(self) -> None:
        """Put every model into eval mode before ``represent``; each half names its models."""

    @torch.no_grad()
    def embed(self, rows: np.ndarray) -> np.ndarray:
        """This party's representation of aligned ``rows``, for evaluation and inference (on the CPU)."""
        self.eval()
        out: np.ndarray = self.represent(self.ctx.features[rows]).cpu().numpy()
        return out

    def onnx_part(self, rows: np.ndarray) -> OnnxPart:
        """This party's trained part as an ONNX export: ``features`` in, ``embedding`` out, probed on ``rows``."""
        self.eval()
        modules = _modules(self, self.checkpointed)
        return OnnxPart(self.represent, {"features": self.ctx.features[rows]}, ("embedding",), modules=modules)

    #: The attributes that hold this half's training state; see ``ServerAlgorithm.checkpointed``.
    checkpointed: tuple[str, ...] = ()

    def state(self) -> dict[str, Any]:
        """Everything ``checkpointed`` names, for this party's checkpoint."""
        return capture(self, self.checkpointed)

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (from ``state()``), as if training had never stopped."""
        restore(self, state, self.checkpointed)

    def share(self, name: str) -> np.ndarray:
        """A tensor the active party asks for by name after training (VIMADMM-J: its head W_k)."""
        raise ConfigError(f"the server asked for {name!r}, which {self.name!r} does not share")


def _modules(half: object, names: Iterable[str]) -> list[nn.Module]:
    """The torch modules among a half's ``checkpointed`` attributes: the models its ONNX export uses."""
    found = [getattr(half, name, None) for name in names if "." not in name]
    return [module for module in found if isinstance(module, nn.Module)]


# ---- the spec and the registry ----------------------------------------------------------------

#: Checks an algorithm's completed options; raises ConfigError naming the key.
OptionsCheck = Callable[[Mapping[str, Any]], None]


def _no_check(options: Mapping[str, Any]) -> None:
    """For an algorithm whose options need no check beyond their names."""


def _resolve(target: type | str) -> Any:
    """A class, or the class a ``"package.module:Class"`` string names (imported on first use)."""
    if not isinstance(target, str):
        return target
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class AlgorithmSpec:
    """Everything the daemons need to know about one algorithm, by the name ``[job] algorithm`` uses.

    The halves and the reference may be given as ``"module:Class"`` strings: a ``spec.py`` then
    need not import the halves, which import its tensor names (no import cycle), and listing the
    algorithms does not build any of them.
    """

    name: str
    active: type[ServerAlgorithm] | str
    passive: type[ClientAlgorithm] | str
    #: Each option's default (the ``[algorithm]`` table); an option not listed here is refused.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    check: OptionsCheck = _no_check
    #: The in-process reference (``from_tables``, ``train_epoch``, ``step_losses``), if it has one.
    reference: type | str | None = None
    #: The options that change how far a step goes (VIMADMM's ``rho``): named, with their values,
    #: in the message of a job that diverged (``divergence_advice``), beside ``[job] learning_rate``.
    tuning: tuple[str, ...] = ()

    def active_half(self) -> type[ServerAlgorithm]:
        """The active party's half."""
        half: type[ServerAlgorithm] = _resolve(self.active)
        return half

    def passive_half(self) -> type[ClientAlgorithm]:
        """A passive party's half."""
        half: type[ClientAlgorithm] = _resolve(self.passive)
        return half

    def reference_class(self) -> Any:
        """The in-process reference, or None."""
        return None if self.reference is None else _resolve(self.reference)

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` checked against this algorithm's options and completed with their defaults."""
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "none"
            raise ConfigError(f"[algorithm] {unknown[0]} is not an option of {self.name!r} (its options: {allowed})")
        options = {**self.defaults, **given}
        self.check(options)
        return options


_REGISTRY: dict[str, AlgorithmSpec] = {}
_DISCOVERY = threading.Lock()
_discovered = False


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Make ``spec`` available by its name; returns it, so a ``spec.py`` can write ``SPEC = register(...)``."""
    known = _REGISTRY.get(spec.name)
    if known is not None and known != spec:
        raise ConfigError(f"two algorithms are registered as {spec.name!r}: {known.active} and {spec.active}")
    _REGISTRY[spec.name] = spec
    return spec


def _discover() -> None:
    """Import ``vflalgorithms.<folder>.spec`` for every folder, once per process."""
    global _discovered
    with _DISCOVERY:
        if _discovered:
            return
        package = importlib.import_module("vflalgorithms")
        for module in pkgutil.iter_modules(package.__path__):
            if module.ispkg:
                importlib.import_module(f"vflalgorithms.{module.name}.spec")
        _discovered = True


def algorithms() -> dict[str, AlgorithmSpec]:
    """Every registered algorithm, by name."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The spec registered as ``name``, or a ConfigError listing what exists."""
    found = algorithms()
    if name not in found:
        raise ConfigError(f"[job] algorithm = {name!r} is not available; choose one of {sorted(found)}")
    return found[name]


def algorithm_options(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` checked against algorithm ``name``'s options and completed with their defaults."""
    return algorithm_spec(name).options(given)


def job_options(job: JobSpec) -> dict[str, Any]:
    """The job's algorithm options, completed with their defaults: what both halves read."""
    return algorithm_options(job.algorithm, job.algorithm_options)
