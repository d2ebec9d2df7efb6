"""SplitNN, a passive party's half (thesis 002 §4.1): send h^k, get ∂L/∂h^k back, step.

The party never sees labels or the top model, and the server never sees this party's weights
or raw features: only the representation of a batch and its gradient cross the wire.
"""

from __future__ import annotations

import torch

from vflalgorithms.base import ClientAlgorithm, PassiveContext, job_options
from vflalgorithms.delays import Delay
from vflalgorithms.splitnn.micro import MicroBatches
from vflcore.job import model_seed
from vflcore.ml.models import build_seeded, job_optimizer, mlp
from vflcore.wire.names import EMBEDDING, GRADIENT
from vflcore.wire.tensors import check_shape


class SplitNNClient(ClientAlgorithm):
    """A bottom model trained by the gradients the active party returns."""

    name = "splitnn"
    #: Updates per gradient received; FedBCD sets its Q here.
    local_steps = 1
    checkpointed: tuple[str, ...] = ("bottom", "optimizer", "delay._rng")

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job, width = ctx.job, ctx.features.shape[1]
        factory = ctx.model_factory or (lambda n_in, n_out: mlp(n_in, job.bottom_hidden, n_out))
        self.bottom = build_seeded(
            lambda: factory(width, job.embedding_dim), model_seed(job.seed, ctx.party, "bottom")
        ).to(ctx.device)
        self.optimizer = job_optimizer(job, self.bottom.parameters())
        self.delay = Delay(job, ctx.party)  # the thesis's delay scenarios, if the job asks for one
        #: Parts per batch on the wire (``vflalgorithms.splitnn.micro``); async has no such option.
        self.micro_batches = int(job_options(job).get("micro_batches", 1))

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        ctx = self.ctx
        self.bottom.train()
        batches = ctx.schedule.batches(epoch)
        parts = MicroBatches(batches, self.micro_batches)
        with ctx.link.exchange(
            ctx.job.job_id, epoch, parts.wire(len(batches)), up=EMBEDDING, down=GRADIENT, first=parts.wire(first_batch)
        ) as exchange:
            for b in range(first_batch, len(batches)):
                x = ctx.features[batches[b]]
                bounds = parts.bounds(b)
                self.delay.before_step()
                sent = []
                for i, (start, stop) in enumerate(bounds):  # each part leaves as soon as it is computed
                    h = self.bottom(x[start:stop])
                    exchange.send(parts.wire(b, i), h.detach().cpu().numpy())
                    sent.append(h)
                self.optimizer.zero_grad()
                gradients = []
                for i, h in enumerate(sent):  # and each part's gradient goes in as soon as it is back
                    received = exchange.receive(parts.wire(b, i))
                    check_shape(received, tuple(h.shape), what="gradient from the server")
                    gradients.append(ctx.tensor(received))
                    h.backward(gradients[-1])
                self.optimizer.step()
                gradient = gradients[0] if len(gradients) == 1 else torch.cat(gradients)
                for _ in range(1, self.local_steps):  # FedBCD: the same gradient, into h^k from the current weights
                    h = self.bottom(x)
                    self.optimizer.zero_grad()
                    h.backward(gradient)
                    self.optimizer.step()
                ctx.after_step(epoch, b + 1, len(batches))

    def eval(self) -> None:
        self.bottom.eval()

    def represent(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bottom(features)
        return out
