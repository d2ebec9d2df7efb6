"""SplitNN, a passive party's half (thesis 002 §4.1): send h^k, get ∂L/∂h^k back, step.

The party never sees labels or the top model, and the server never sees this party's weights
or raw features: only the representation of a batch and its gradient cross the wire.
"""

from __future__ import annotations

import collections

import torch

from vflalgorithms.contexts import PassiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.family import SplitNNFamilyClient
from vflalgorithms.splitnn.overlap import MicroBatches, overlap_options
from vflcore.wire.links import TensorExchange
from vflcore.wire.names import EMBEDDING, GRADIENT
from vflcore.wire.tensors import check_shape


class SplitNNClient(SplitNNFamilyClient):
    """A bottom model trained by the gradients the active party returns."""

    name = "splitnn"
    #: Updates per gradient received; FedBCD sets its Q here.
    local_steps = 1

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        #: Parts per batch on the wire, and batches sent ahead of the gradient awaited (staleness, opt-in):
        #: ``[algorithm] micro_batches`` and ``pipeline_depth`` (``vflalgorithms.splitnn.overlap``; async has neither).
        self.micro_batches, self.pipeline_depth = overlap_options(job_options(ctx.job))

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        ctx = self.ctx
        self.bottom.train()
        batches = ctx.schedule.batches(epoch)
        parts = MicroBatches(batches, self.micro_batches)
        with ctx.link.exchange(
            ctx.job.job_id, epoch, parts.wire(len(batches)), up=EMBEDDING, down=GRADIENT, first=parts.wire(first_batch)
        ) as exchange:
            ahead: collections.deque[tuple[int, torch.Tensor, list[torch.Tensor]]] = collections.deque()
            for b in range(first_batch, len(batches)):
                x = ctx.features[batches[b]]
                self.delay.before_step()
                ahead.append((b, x, self._send(exchange, parts, b, x)))
                if len(ahead) > self.pipeline_depth:  # 0, unless the job asks for staleness
                    self._update(exchange, parts, *ahead.popleft())
                    ctx.after_step(epoch, b + 1 - len(ahead), len(batches))
            while ahead:
                self._update(exchange, parts, *ahead.popleft())
                ctx.after_step(epoch, len(batches) - len(ahead), len(batches))

    def _send(self, exchange: TensorExchange, parts: MicroBatches, batch: int, x: torch.Tensor) -> list[torch.Tensor]:
        """h^k of ``batch``, each part sent as soon as it is computed; the parts, with their graphs."""
        sent = []
        with torch.set_grad_enabled(not self.pipeline_depth):  # a stale h^k is recomputed in _update
            for i, (start, stop) in enumerate(parts.bounds(batch)):
                h = self.bottom(x[start:stop])
                exchange.send(parts.wire(batch, i), h.detach().cpu().numpy())
                sent.append(h)
        return sent

    def _update(
        self, exchange: TensorExchange, parts: MicroBatches, batch: int, x: torch.Tensor, sent: list[torch.Tensor]
    ) -> None:
        """``batch``'s gradient into the bottom model: each part's as it arrives, one step, then FedBCD's Q - 1."""
        self.optimizer.zero_grad()
        gradients = []
        for i, h in enumerate(sent):
            received = exchange.receive(parts.wire(batch, i))
            check_shape(received, tuple(h.shape), what="gradient from the server")
            gradients.append(self.ctx.tensor(received))
            if not self.pipeline_depth:
                torch.autograd.backward(h, gradients[-1])
        gradient = gradients[0] if len(gradients) == 1 else torch.cat(gradients)
        if not self.pipeline_depth:
            self.optimizer.step()
        # A stale h^k (pipeline) takes every update, and FedBCD its further Q - 1, on h^k
        # recomputed from the current weights, with the same gradient.
        for _ in range(1 if not self.pipeline_depth else 0, self.local_steps):
            fresh: torch.Tensor = self.bottom(x)
            self.optimizer.zero_grad()
            torch.autograd.backward(fresh, gradient)
            self.optimizer.step()
