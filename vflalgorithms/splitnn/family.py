"""The SplitNN family's bases: what SplitNN, FedBCD, async, VIMSGD, VIMADMM and VIMADMM-J share.

Every member runs the same step, seen from the active party: each passive party uploads one
tensor per batch (its embedding h^k, or VIMADMM-J's logits), the server runs one round on the
uploads, each party gets an answer back, and the active party's own bottom model (if it has
features) learns from its own answer as one more client would. The members differ only in
the hooks below; each overrides hooks, never another member's internals:

- the forward exchange, ``_exchange``: one batch's uploads gathered and the round run on them.
  By default the whole batch at once; SplitNN takes it in parts (``splits_batches``).
- the server update, ``_server_update``: one round's update of the server's models on the
  received uploads. It returns a ``Round``: the loss, each passive party's answer and the
  active party's own.
- the answers sent down, ``_answers``: what each passive party receives (∂L/∂h^k, or ADMM
  state), by default its answer from the ``Round``; published before any local update, so the
  parties do not wait for them. Every answer leaves through ``_publish``, where a gradient
  passes the job's label defence first (``vflalgorithms.label_protection``).
- the local updates, ``_local_updates``: the active party's own bottom model from its own
  answer, and the further local steps (FedBCD's Q - 1, VIMADMM's τ).

The base builds only what every member has (the own bottom model and the loss); each member's
constructor builds its server models and optimizers after calling this one.

A passive party's half (``SplitNNFamilyClient``) is a bottom model, its optimizer and the
job's delay scenario; each member's ``train_epoch`` says what it sends and how it learns from
the answer (SplitNN's gradients, VIMADMM's ADMM state).
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.contexts import ActiveContext, PassiveContext, Publish
from vflalgorithms.delays import Delay
from vflalgorithms.divergence import nonfinite
from vflalgorithms.factories import PROBE_ROWS, ModelSlot
from vflalgorithms.halves import ClientAlgorithm, ServerAlgorithm
from vflalgorithms.label_protection import LABEL_DEFENCE_POWER, LabelProtection
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.overlap import MicroBatches, overlap_options
from vflcore.errors import TrainingDiverged
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.models import build_seeded, mlp
from vflcore.ml.optimizers import role_optimizer
from vflcore.runtime.logs import progress
from vflcore.wire.names import EMBEDDING, GRADIENT
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import TrainEpoch

OWN_BOTTOM = "own_bottom_factory"

#: One party's answer to a round: named tensors (``GRADIENT``, or the ADMM state).
Answer = dict[str, torch.Tensor]


def own_bottom(ctx: ActiveContext) -> nn.Module | None:
    """The active party's own bottom model f_1 (``[model] own_bottom_factory``, else an MLP); None without features."""
    job, own = ctx.job, ctx.features.shape[1]
    if not own:
        return None
    return ctx.model(
        OWN_BOTTOM,
        lambda n_in, n_out: mlp(n_in, job.bottom_hidden, n_out),
        (own, job.embedding_dim),
        model_seed(job.seed, ACTIVE_PARTY, "bottom"),
    )


def own_bottom_slot(job: JobSpec, own_features: int) -> dict[str, ModelSlot]:
    """``own_bottom_factory(num_features, embedding_dim)``: features in, the party's embedding out."""
    if not own_features:
        return {}
    return {
        OWN_BOTTOM: ModelSlot(
            "the own bottom model",
            (own_features, job.embedding_dim),
            (PROBE_ROWS, own_features),
            (PROBE_ROWS, job.embedding_dim),
        )
    }


def gradient_answer(leaves: list[torch.Tensor]) -> list[Answer]:
    """∂L/∂h of each leaf, as the answer its party receives (SplitNN, FedBCD, async, VIMSGD)."""
    return [{GRADIENT: cast(torch.Tensor, h.grad)} for h in leaves]


@dataclass(frozen=True)
class Round:
    """What one round's server update (or one part of it) produced."""

    #: The round's loss: what ``step_losses`` records.
    loss: float
    #: Each passive party's answer, in party order.
    answers: list[Answer]
    #: The active party's own answer, as a client of itself; None without features of its own.
    own: Answer | None = None


class SplitNNFamilyServer(ServerAlgorithm):
    """The active half of an algorithm that trains on one upload per party per batch, answered per batch."""

    #: Whether a batch may cross the link in parts (``[algorithm] micro_batches``,
    #: ``vflalgorithms.splitnn.overlap``): only a member whose ``_exchange`` takes them says so.
    splits_batches = False
    #: Updates per round on the round's uploads: FedBCD's Q, VIMADMM's τ.
    local_steps = 1
    #: Parts per batch on the wire; 1 unless the member ``splits_batches`` and the job asks for more.
    micro_batches = 1
    factory_keys: tuple[str, ...] = (OWN_BOTTOM,)
    resumes_mid_epoch = True
    scores_inside_epoch = True

    @classmethod
    def model_slots(cls, job: JobSpec, own_features: int, num_outputs: int) -> dict[str, ModelSlot]:
        return own_bottom_slot(job, own_features)

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        self.loss_fn = task_loss(ctx.job.task)
        self.bottom = own_bottom(ctx)
        #: The job's label defence, applied to every gradient ``_publish`` sends; None without one.
        self.label_protection = LabelProtection.of(ctx)
        if self.splits_batches:
            self.micro_batches = overlap_options(job_options(ctx.job)).micro_batches

    # ---- the hooks ------------------------------------------------------------------------------

    @abstractmethod
    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        """The server's model on [h^1 if any] + every passive upload in party order: the raw output."""

    @abstractmethod
    def _server_update(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray) -> Round:
        """One round's update of the server's models on the received ``passive`` uploads (in party order).

        ``own`` is h^1 of ``rows`` with its graph (empty without own features). Returns the
        round's loss and every party's answer; nothing is sent yet.
        """

    def _answers(self, result: Round) -> list[Answer]:
        """What each passive party is sent for the round, in party order: its answer, as is."""
        return result.answers

    def _local_updates(
        self, own: list[torch.Tensor], answer: Answer | None, passive: list[torch.Tensor], rows: np.ndarray
    ) -> None:
        """After the answers are sent: the own bottom model from its ``answer``, and any further local steps."""

    def _models(self) -> list[nn.Module]:
        """Every model this half trains, for train and eval mode."""
        return [] if self.bottom is None else [self.bottom]

    def _exchange(
        self, epoch: int, batch: int, parts: MicroBatches, own: list[torch.Tensor], rows: np.ndarray
    ) -> float:
        """The forward exchange of one batch: every party's upload of it, one round on them; returns its loss."""
        ctx, wire = self.ctx, parts.wire(batch)
        uploads = ctx.parties.gather(EMBEDDING, epoch, wire)
        parties = sorted(uploads)
        passive = [ctx.tensor(uploads[p]) for p in parties]
        return self._round(own, passive, rows, publish=functools.partial(self._publish, epoch, wire, parties, rows))

    # ---- the step, built from the hooks ---------------------------------------------------------

    def _round(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray, publish: Publish) -> float:
        """One communication round: the server update, the answers sent down, then the local updates."""
        result = self._server_update(own, passive, rows)
        self.check_loss(result.loss)  # a NaN loss is named as such, before its NaN answers would be sent
        publish(self._answers(result))
        self._local_updates(own, result.own, passive, rows)
        return result.loss

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        ctx, fed = self.ctx, self.ctx.parties
        batches = ctx.schedule.batches(epoch)
        parts = MicroBatches(batches, self.micro_batches)
        for b in range(first_batch, len(batches)):
            for i, (start, stop) in enumerate(parts.bounds(b)):
                fed.expect(EMBEDDING, epoch, parts.wire(b, i), (stop - start, self.upload_width))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch, first_batch))
        self._train_mode()
        steps = range(first_batch, len(batches))
        for b in progress(steps, total=len(steps), desc=f"epoch {epoch + 1}"):
            rows = batches[b]
            own = self._own(rows)  # computed while the passive parties compute theirs
            check_own(own)
            self.record_step(self._exchange(epoch, b, parts, own, rows))
            ctx.after_step(epoch, b + 1, len(batches))
        return self.epoch_loss(batches)

    def _train_mode(self) -> None:
        for model in self._models():
            model.train()

    def _own(self, rows: np.ndarray) -> list[torch.Tensor]:
        """The active party's own representation h^1 of ``rows``, if it has features."""
        return [] if self.bottom is None else [self.bottom(self.ctx.features[rows])]

    @staticmethod
    def _cut(own: list[torch.Tensor]) -> list[torch.Tensor]:
        """h^1 as a leaf, so the server model's backward pass stops there (the own bottom model follows later)."""
        return [h.detach().requires_grad_(True) for h in own]

    def _publish(self, epoch: int, batch: int, parties: list[int], rows: np.ndarray, answers: list[Answer]) -> None:
        """Leave each party its answer for ``rows``, the batch (or a part: ``batch`` is its wire index).

        Named tensors, in ``parties`` order. A gradient passes the job's label defence on the way,
        with noise of its own (epoch, wire batch, party): the one place every member's answers leave.
        """
        protection = self.label_protection
        for party, answer in zip(parties, answers, strict=True):
            for name, tensor in answer.items():
                if protection is not None and name in self.label_defended:
                    tensor = protection.perturb(tensor.detach(), rows, epoch, batch, party, name)
                key = TensorKey(self.ctx.job.job_id, epoch, batch, name)
                self.ctx.parties.publish(party, key, tensor.detach().cpu().numpy())

    def state(self) -> dict[str, Any]:
        """``checkpointed``, and the label defence's job-level floor (``JobPower``) if the job has one."""
        state = super().state()
        if self.label_protection is not None:
            state[LABEL_DEFENCE_POWER] = self.label_protection.power.state()
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """``checkpointed``, and the floor if the checkpoint holds one (an older one has none: it starts anew)."""
        super().load_state(state)
        if self.label_protection is not None and LABEL_DEFENCE_POWER in state:
            self.label_protection.power.load(state[LABEL_DEFENCE_POWER])

    def eval(self) -> None:
        for model in self._models():
            model.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        own = [] if self.bottom is None else [self.bottom(features)]
        return self._forward(own, [uploads[p] for p in sorted(uploads)])


def check_own(own: list[torch.Tensor]) -> None:
    """Raise TrainingDiverged if the active party's own bottom model output h^1 is NaN or infinite."""
    for h in own:
        if not bool(torch.isfinite(h).all()):
            raise TrainingDiverged(f"the active party's own bottom model output is not finite ({nonfinite(h)})")


class SplitNNFamilyClient(ClientAlgorithm):
    """A passive party's half in the family: a bottom model trained from the server's answers."""

    checkpointed: tuple[str, ...] = ("bottom", "optimizer", "delay._rng")

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job, width = ctx.job, ctx.features.shape[1]
        factory = ctx.model_factory or (lambda n_in, n_out: mlp(n_in, job.bottom_hidden, n_out))
        self.bottom = build_seeded(
            lambda: factory(width, job.embedding_dim), model_seed(job.seed, ctx.party, "bottom")
        ).to(ctx.device)
        self.optimizer = role_optimizer(job, "bottom", self.bottom.parameters())
        self.delay = Delay(job, ctx.party)  # the thesis's delay scenarios, if the job asks for one

    def eval(self) -> None:
        self.bottom.eval()

    def represent(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bottom(features)
        return out


__all__ = [
    "OWN_BOTTOM",
    "Answer",
    "Round",
    "SplitNNFamilyClient",
    "SplitNNFamilyServer",
    "check_own",
    "gradient_answer",
    "own_bottom",
    "own_bottom_slot",
]
