"""The two halves of a training algorithm: the active party's and a passive party's.

Each algorithm's folder subclasses both (``ServerAlgorithm``, ``ClientAlgorithm``). The daemons
call only the methods declared here (train an epoch, predict or embed rows, export to ONNX,
checkpoint and restore), so they never need to know which algorithm runs. The class attributes
are what an algorithm declares about itself (its ``[model]`` factories, which tensors a label
defence protects, whether it resumes mid-epoch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from vflalgorithms.contexts import ActiveContext, PassiveContext
from vflalgorithms.factories import ModelSlot
from vflcore.errors import ConfigError, check_finite
from vflcore.job.spec import JobSpec
from vflcore.ml.onnx_export import OnnxPart
from vflcore.ml.state import capture, restore


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
