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
from collections.abc import Callable, Mapping
from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.base import ActiveContext, Publish, ServerAlgorithm, job_options
from vflalgorithms.factories import PROBE_ROWS, ModelSlot
from vflalgorithms.splitnn.overlap import MicroBatches
from vflcore.job import ACTIVE_PARTY, JobSpec, model_seed
from vflcore.ml.losses import task_loss
from vflcore.ml.models import job_optimizer, mlp
from vflcore.runtime.logs import progress
from vflcore.wire.names import EMBEDDING, GRADIENT
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import TrainEpoch

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
    #: Parts per batch on the wire (``[algorithm] micro_batches``, ``vflalgorithms.splitnn.overlap``).
    micro_batches = 1
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
        self.micro_batches = int(job_options(job).get("micro_batches", 1))

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
        parts = MicroBatches(batches, self.micro_batches)
        for b in range(first_batch, len(batches)):
            for i, (start, stop) in enumerate(parts.bounds(b)):
                fed.expect(EMBEDDING, epoch, parts.wire(b, i), (stop - start, self.upload_width))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch, first_batch))
        self.top.train()
        if self.bottom is not None:
            self.bottom.train()
        steps = range(first_batch, len(batches))
        for b in progress(steps, total=len(steps), desc=f"epoch {epoch + 1}"):
            rows = batches[b]
            own = self._own(rows)  # computed while the passive parties compute theirs
            if self.micro_batches > 1:  # SplitNN and FedBCD only; the VIM family overrides _round
                value = self._pipelined_round(epoch, b, parts, own, rows)
            else:
                uploads = fed.gather(EMBEDDING, epoch, b)
                parties = sorted(uploads)
                passive = [ctx.tensor(uploads[p]) for p in parties]
                value = self._round(own, passive, rows, publish=functools.partial(self._publish, epoch, b, parties))
            self.record_step(value)
            ctx.after_step(epoch, b + 1, len(batches))
        return self.epoch_loss(batches)

    def _publish(self, epoch: int, batch: int, parties: list[int], answers: list[dict[str, torch.Tensor]]) -> None:
        """Leave each party its answer for the batch (or a part's wire index): named tensors, in ``parties`` order."""
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
        whole = [(0, len(rows))]
        value = self._first_update(own, rows, whole, lambda part: passive, lambda part, grads: publish(grads))
        self._local_updates(passive, rows)
        return value

    def _pipelined_round(
        self, epoch: int, batch: int, parts: MicroBatches, own: list[torch.Tensor], rows: np.ndarray
    ) -> float:
        """``_round`` with the batch in parts (``vflalgorithms.splitnn.overlap``): each part answered as it arrives."""
        ctx, received = self.ctx, list[list[torch.Tensor]]()

        def arrivals(part: int) -> list[torch.Tensor]:
            uploads = ctx.parties.gather(EMBEDDING, epoch, parts.wire(batch, part))
            received.append([ctx.tensor(uploads[p]) for p in sorted(uploads)])
            return received[-1]

        def publish(part: int, grads: list[dict[str, torch.Tensor]]) -> None:
            self._publish(epoch, parts.wire(batch, part), sorted(ctx.job.passive_parties), grads)

        value = self._first_update(own, rows, parts.bounds(batch), arrivals, publish)
        if self.local_steps > 1:  # FedBCD: the further updates take the batch whole
            self._local_updates([torch.cat(hs) for hs in zip(*received, strict=True)], rows)
        return value

    def _first_update(
        self,
        own: list[torch.Tensor],
        rows: np.ndarray,
        bounds: list[tuple[int, int]],
        arrivals: Callable[[int], list[torch.Tensor]],
        publish: Callable[[int, list[dict[str, torch.Tensor]]], None],
    ) -> float:
        """The round's first update, part by part; returns its loss (the parts' sum).

        Each part's passive embeddings (in party order) come from ``arrivals(part)``, and their
        gradients go to ``publish(part, ...)`` as soon as the top model's backward pass has them,
        before the next part is awaited. With several parts each part's loss is scaled by its
        share of the rows, so the parameter gradients summed over the parts are the whole
        batch's; the own bottom model and the optimizer step once, after the last part. With one
        part this is the plain SplitNN update.
        """
        self.optimizer.zero_grad()
        own_leaf = self._cut(own)
        total = 0.0
        for part, (start, stop) in enumerate(bounds):
            leaves = [h.requires_grad_(True) for h in arrivals(part)]
            share = own_leaf if len(bounds) == 1 else [h[start:stop] for h in own_leaf]
            loss = self.loss_fn(self._forward(share, leaves), self.ctx.labels[rows[start:stop]])
            if len(bounds) > 1:
                loss = loss * ((stop - start) / len(rows))
            loss.backward()  # the top model only: it ends at h^1 and every h^k
            publish(part, [{GRADIENT: cast(torch.Tensor, h.grad)} for h in leaves])
            total += loss.item()
        if own:  # now the active party's own bottom model, from h^1's gradient
            torch.autograd.backward(own, [cast(torch.Tensor, leaf.grad) for leaf in own_leaf])
        self.optimizer.step()
        return total

    def _local_updates(self, passive: list[torch.Tensor], rows: np.ndarray) -> None:
        """FedBCD's further Q - 1 updates on the round's ``passive`` embeddings, with h^1 recomputed."""
        for _ in range(1, self.local_steps):
            self.optimizer.zero_grad()
            own = self._own(rows)
            own_leaf = self._cut(own)
            loss = self.loss_fn(self._forward(own_leaf, [h.detach() for h in passive]), self.ctx.labels[rows])
            loss.backward()
            if own:
                torch.autograd.backward(own, [cast(torch.Tensor, leaf.grad) for leaf in own_leaf])
            self.optimizer.step()

    def eval(self) -> None:
        self.top.eval()
        if self.bottom is not None:
            self.bottom.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        own = [] if self.bottom is None else [self.bottom(features)]
        return self._forward(own, [uploads[p] for p in sorted(uploads)])
