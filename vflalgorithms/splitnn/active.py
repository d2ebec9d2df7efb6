"""SplitNN, the active party's half (thesis 002 §4.1): concatenate, top model, send gradients back.

Per step: wait for every passive party's h^k of the batch, concatenate them with the active
party's own h^1 (if it has features), run the top model and the loss, and return ∂L/∂h^k to
each party.

The step is ordered so that the passive parties wait as little as possible, without changing
a single number: the active party's own forward pass runs while it waits for theirs; their
gradients are published as soon as the top model's backward pass produces them, before the
active party back-propagates into its own bottom model and steps its optimizer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.base import ActiveContext, Publish, ServerAlgorithm
from vflalgorithms.factories import PROBE_ROWS, ModelSlot
from vflcore.job import ACTIVE_PARTY, JobSpec, model_seed
from vflcore.ml.losses import task_loss
from vflcore.ml.models import job_optimizer, mlp
from vflcore.runtime.logs import progress
from vflcore.tasks import TrainEpoch
from vflcore.wire.names import EMBEDDING, GRADIENT
from vflcore.wire.tensors import TensorKey

OWN_BOTTOM, TOP = "own_bottom_factory", "top_factory"


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


class SplitNNServer(ServerAlgorithm):
    """Top model over the concatenated representations of every party."""

    name = "splitnn"
    #: Updates per communication round; FedBCD sets its Q here.
    local_steps = 1
    #: Its own bottom model is None when the active party has no features.
    checkpointed: tuple[str, ...] = ("step_losses", "top", "bottom", "optimizer")

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
        self.bottom = own_bottom(ctx)
        parts = len(job.passive_parties) + (1 if self.bottom is not None else 0)
        self.top = self._build_top(parts)
        params = list(self.top.parameters()) + (list(self.bottom.parameters()) if self.bottom is not None else [])
        self.optimizer = job_optimizer(job, params)
        self.loss_fn = task_loss(job.task)

    def _build_top(self, parts: int) -> nn.Module:
        """The model over ``parts`` embeddings (``[model] top_factory``, else an MLP on their concatenation)."""
        ctx = self.ctx
        return ctx.model(
            TOP,
            lambda n_in, n_out: mlp(n_in, ctx.top_hidden, n_out, dropout=ctx.top_dropout),
            (ctx.job.embedding_dim * parts, ctx.num_outputs),
            model_seed(ctx.job.seed, ACTIVE_PARTY, "top"),
        )

    def _own(self, rows: np.ndarray) -> list[torch.Tensor]:
        """The active party's own representation h^1 of ``rows``, if it has features."""
        return [] if self.bottom is None else [self.bottom(self.ctx.features[rows])]

    @staticmethod
    def _cut(own: list[torch.Tensor]) -> list[torch.Tensor]:
        """h^1 as a leaf, so the top model's backward pass stops there (see ``train_epoch``)."""
        return [h.detach().requires_grad_(True) for h in own]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(torch.cat(own + passive, dim=1))
        return output

    resumes_mid_epoch = True

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        ctx, fed = self.ctx, self.ctx.parties
        batches = ctx.schedule.batches(epoch)
        for b in range(first_batch, len(batches)):
            fed.expect(EMBEDDING, epoch, b, (len(batches[b]), self.upload_width))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch, first_batch))
        self.top.train()
        if self.bottom is not None:
            self.bottom.train()
        steps = range(first_batch, len(batches))
        for b in progress(steps, total=len(steps), desc=f"epoch {epoch + 1}"):
            rows = batches[b]
            own = self._own(rows)  # computed while the passive parties compute theirs
            uploads = fed.gather(EMBEDDING, epoch, b)
            parties = sorted(uploads)
            passive = [ctx.tensor(uploads[p]) for p in parties]
            value = self._round(own, passive, rows, publish=functools.partial(self._publish, epoch, b, parties))
            self.record_step(value)
            ctx.after_step(epoch, b + 1, len(batches))
        return self.epoch_loss(batches)

    def _publish(self, epoch: int, batch: int, parties: list[int], answers: list[dict[str, torch.Tensor]]) -> None:
        """Leave each party its answer for the batch: named tensors, in ``parties`` order."""
        for party, answer in zip(parties, answers, strict=True):
            for name, tensor in answer.items():
                key = TensorKey(self.ctx.job.job_id, epoch, batch, name)
                self.ctx.parties.publish(party, key, tensor.detach().cpu().numpy())

    def _round(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray, publish: Publish) -> float:
        """One communication round on the received ``passive`` embeddings; returns its loss.

        ``local_steps`` updates (FedBCD's Q) reuse the same passive embeddings; only the first
        computes ∂L/∂h^k for the passive parties, and ``own`` is recomputed with the current
        weights from the second on. With one step this is SplitNN.
        """
        first_loss = 0.0
        for step in range(self.local_steps):
            self.optimizer.zero_grad()
            if step:
                own = self._own(rows)
            leaves = [h.requires_grad_(step == 0) for h in passive]
            own_leaf = self._cut(own)
            loss = self.loss_fn(self._forward(own_leaf, leaves), self.ctx.labels[rows])
            loss.backward()  # the top model only: it ends at h^1 and every h^k
            if step == 0:
                publish([{GRADIENT: cast(torch.Tensor, h.grad)} for h in leaves])
                first_loss = loss.item()
            if own:  # now the active party's own bottom model, from h^1's gradient
                torch.autograd.backward(own, [leaf.grad for leaf in own_leaf])
            self.optimizer.step()
        return first_loss

    def eval(self) -> None:
        self.top.eval()
        if self.bottom is not None:
            self.bottom.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        own = [] if self.bottom is None else [self.bottom(features)]
        return self._forward(own, [uploads[p] for p in sorted(uploads)])
