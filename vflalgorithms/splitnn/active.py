"""SplitNN, the active party's half (thesis 002 §4.1): concatenate, top model, send gradients back.

Per step: wait for every passive party's h^k of the batch, concatenate them with the active
party's own h^1 (if it has features), run the top model and the loss, and return ∂L/∂h^k to
each party. The step is the SplitNN family's (``vflalgorithms.splitnn.family``); this module
fills in its hooks, and FedBCD and async build on it.

The step is ordered so that the passive parties wait as little as possible, without changing
a single number: the active party's own forward pass runs while it waits for theirs; their
gradients are published as soon as the top model's backward pass produces them, before the
active party back-propagates into its own bottom model and steps its optimizers. With
``[algorithm] micro_batches`` (``vflalgorithms.splitnn.overlap``) each part of the batch is
answered as soon as it arrives.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from torch import nn

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.factories import PROBE_ROWS, ModelSlot
from vflalgorithms.splitnn.family import (
    OWN_BOTTOM,
    Answer,
    Round,
    SplitNNFamilyServer,
    gradient_answer,
    own_bottom,
    own_bottom_slot,
)
from vflalgorithms.splitnn.overlap import MicroBatches
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.models import mlp
from vflcore.ml.optimizers import role_optimizer
from vflcore.wire.names import EMBEDDING, GRADIENT

TOP = "top_factory"


class SplitNNServer(SplitNNFamilyServer):
    """Top model over the concatenated representations of every party."""

    name = "splitnn"
    #: The round's update sums its rows' losses, so a batch may arrive in parts (``_exchange``).
    splits_batches = True
    #: Each party is sent ∂L/∂h^k of its rows (so are FedBCD's and async's, which build on this).
    label_defended: tuple[str, ...] = (GRADIENT,)
    #: Its own bottom model is None when the active party has no features.
    checkpointed: tuple[str, ...] = ("step_losses", "top", "bottom", "optimizer", "bottom_optimizer")

    factory_keys: tuple[str, ...] = (OWN_BOTTOM, TOP)

    @classmethod
    def model_slots(cls, job: JobSpec, own_features: int, num_outputs: int) -> dict[str, ModelSlot]:
        """The own bottom model, and ``top_factory(input_width, num_outputs)`` over the concatenated embeddings."""
        width = job.embedding_dim * (len(job.passive_parties) + (1 if own_features else 0))
        top = ModelSlot("the top model", (width, num_outputs), (PROBE_ROWS, width), (PROBE_ROWS, num_outputs))
        return {**own_bottom_slot(job, own_features), TOP: top}

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        parts = len(job.passive_parties) + (1 if self.bottom is not None else 0)
        self.top = ctx.model(
            TOP,
            lambda n_in, n_out: mlp(n_in, ctx.top_hidden, n_out, dropout=ctx.top_dropout),
            (job.embedding_dim * parts, ctx.num_outputs),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        # The top model steps once per round; the own bottom model, a client of its own party, steps
        # as the passive parties' do (FedBCD's Q times): an optimizer each, each of its role.
        self.optimizer = role_optimizer(job, "top", self.top.parameters())
        own = self.bottom
        self.bottom_optimizer = role_optimizer(job, "bottom", own.parameters()) if own is not None else None

    def _models(self) -> list[nn.Module]:
        return [self.top, *super()._models()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(torch.cat(own + passive, dim=1))
        return output

    def _server_update(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray) -> Round:
        """The top model's backward pass on the whole batch: its loss, ∂L/∂h^k for each party and ∂L/∂h^1.

        The optimizers step in ``_local_updates``, once h^1's gradient has reached the own bottom model.
        """
        self._zero_grad()
        own_leaf = self._cut(own)
        part = self._top_backward(own_leaf, passive, rows, [(0, len(rows))], 0)
        return replace(part, own=self._own_answer(own_leaf))

    def _exchange(
        self, epoch: int, batch: int, parts: MicroBatches, own: list[torch.Tensor], rows: np.ndarray
    ) -> float:
        """The batch whole, or in parts (``vflalgorithms.splitnn.overlap``): each part answered as it arrives.

        In parts, the server update is the top model's backward pass part by part, each part's
        gradients published before the next part is awaited; the local updates follow once, after
        the last part, and FedBCD's further ones take the batch whole.
        """
        bounds = parts.bounds(batch)
        if len(bounds) == 1:
            return super()._exchange(epoch, batch, parts, own, rows)
        ctx, parties = self.ctx, sorted(self.ctx.job.passive_parties)
        self._zero_grad()
        own_leaf = self._cut(own)
        received: list[list[torch.Tensor]] = []
        total = 0.0
        for part in range(len(bounds)):
            wire = parts.wire(batch, part)
            uploads = ctx.parties.gather(EMBEDDING, epoch, wire)
            received.append([ctx.tensor(uploads[p]) for p in sorted(uploads)])
            result = self._top_backward(own_leaf, received[-1], rows, bounds, part)
            self.check_loss(result.loss)
            start, stop = bounds[part]
            self._publish(epoch, wire, parties, rows[start:stop], self._answers(result))
            total += result.loss
        passive = [torch.cat(hs) for hs in zip(*received, strict=True)]
        self._local_updates(own, self._own_answer(own_leaf), passive, rows)
        return total

    def _top_backward(
        self,
        own_leaf: list[torch.Tensor],
        passive: list[torch.Tensor],
        rows: np.ndarray,
        bounds: list[tuple[int, int]],
        part: int,
    ) -> Round:
        """The top model's backward pass on one part of the batch: its loss, and ∂L/∂h^k for each party.

        With several parts each part's loss is scaled by its share of the rows, so the parameter
        gradients summed over the parts are the whole batch's; with one part this is the plain
        SplitNN update.
        """
        start, stop = bounds[part]
        leaves = [h.requires_grad_(True) for h in passive]
        share = own_leaf if len(bounds) == 1 else [h[start:stop] for h in own_leaf]
        loss = self.loss_fn(self._forward(share, leaves), self.ctx.labels[rows[start:stop]])
        if len(bounds) > 1:
            loss = loss * ((stop - start) / len(rows))
        loss.backward()  # the top model only: it ends at h^1 and every h^k
        return Round(loss.item(), gradient_answer(leaves))

    @staticmethod
    def _own_answer(own_leaf: list[torch.Tensor]) -> Answer | None:
        """∂L/∂h^1, once every part's backward pass has reached it; None without own features."""
        return gradient_answer(own_leaf)[0] if own_leaf else None

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad()
        if self.bottom_optimizer is not None:
            self.bottom_optimizer.zero_grad()

    def _local_updates(
        self, own: list[torch.Tensor], answer: Answer | None, passive: list[torch.Tensor], rows: np.ndarray
    ) -> None:
        """The top model's one step; h^1's gradient into the own bottom model, its step, then FedBCD's further Q - 1.

        The top model steps once per round, as in the authors' FedBCD code and the thesis (002
        §5.4.1: only the workers loop). The own bottom model is one of those workers: its further
        steps push the round's ∂L/∂h^1 into h^1 recomputed from its current weights, as a passive
        party does with its own gradient. With one local step this is SplitNN.
        """
        self.optimizer.step()
        if not own or answer is None or self.bottom_optimizer is None:
            return
        gradient = answer[GRADIENT]
        torch.autograd.backward(own, [gradient])
        self.bottom_optimizer.step()
        for _ in range(1, self.local_steps):
            self.bottom_optimizer.zero_grad()
            torch.autograd.backward(self._own(rows), [gradient])
            self.bottom_optimizer.step()


__all__ = ["OWN_BOTTOM", "TOP", "SplitNNServer", "own_bottom", "own_bottom_slot"]
