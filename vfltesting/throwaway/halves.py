"""Both halves of the throwaway algorithm: each passive party a linear bottom, the server a linear top.

Deliberately not SplitNN's code: it is written against ``vflalgorithms.halves`` and the wire's
shared tensor names only, as a new algorithm's author would write it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from vflalgorithms.contexts import ActiveContext, PassiveContext
from vflalgorithms.halves import ClientAlgorithm, ServerAlgorithm
from vflalgorithms.options import job_options
from vflcore.job.schedule import model_seed
from vflcore.ml.losses import task_loss
from vflcore.ml.models import build_seeded, job_optimizer
from vflcore.wire.names import EMBEDDING
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import TrainEpoch

#: This algorithm's own tensor name: the server's answer travels under it (ReturnGradients).
PROBE_GRADIENT = "throwaway/probe-gradient"


class LinearProbeServer(ServerAlgorithm):
    """A linear top over the passive parties' embeddings; the active party's own features are unused."""

    name = "throwaway_linear_probe"
    checkpointed: tuple[str, ...] = ("step_losses", "top", "optimizer")

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        width = job.embedding_dim * len(job.passive_parties)
        self.top = build_seeded(lambda: nn.Linear(width, ctx.num_outputs), model_seed(job.seed, 1, "top"))
        self.optimizer = job_optimizer(job, self.top.parameters())
        self.loss_fn = task_loss(job.task)
        self.scale = float(job_options(job)["gradient_scale"])

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        assert first_batch == 0, "resumes only at the start of an epoch"
        ctx, parties = self.ctx, self.ctx.parties
        batches = ctx.schedule.batches(epoch)
        for b, rows in enumerate(batches):
            parties.expect(EMBEDDING, epoch, b, (len(rows), ctx.job.embedding_dim))
        parties.dispatch(lambda tid: TrainEpoch(tid, epoch))
        self.top.train()
        total = 0.0
        for b, rows in enumerate(batches):
            uploads = parties.gather(EMBEDDING, epoch, b)
            order = sorted(uploads)
            leaves = [torch.from_numpy(uploads[p].copy()).requires_grad_(True) for p in order]
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.top(torch.cat(leaves, dim=1)), ctx.labels[rows])
            loss.backward()
            self.optimizer.step()
            for party, leaf in zip(order, leaves, strict=True):
                assert leaf.grad is not None
                key = TensorKey(ctx.job.job_id, epoch, b, PROBE_GRADIENT)
                parties.publish(party, key, (self.scale * leaf.grad).numpy())
            self.step_losses.append(loss.item())
            total += loss.item() * len(rows)
        return total / max(1, sum(len(r) for r in batches))

    def eval(self) -> None:
        self.top.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(torch.cat([uploads[p] for p in sorted(uploads)], 1))
        return output


class LinearProbeClient(ClientAlgorithm):
    """A linear bottom: the embedding up, the scaled gradient down, one step per batch."""

    name = "throwaway_linear_probe"
    checkpointed: tuple[str, ...] = ("bottom", "optimizer")

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job, width = ctx.job, ctx.features.shape[1]
        self.bottom = build_seeded(
            lambda: nn.Linear(width, job.embedding_dim), model_seed(job.seed, ctx.party, "bottom")
        )
        self.optimizer = job_optimizer(job, self.bottom.parameters())

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        assert first_batch == 0, "resumes only at the start of an epoch"
        ctx = self.ctx
        batches = ctx.schedule.batches(epoch)
        with ctx.link.exchange(ctx.job.job_id, epoch, len(batches), up=EMBEDDING, down=PROBE_GRADIENT) as link:
            for b, rows in enumerate(batches):
                h = self.bottom(ctx.features[rows])
                link.send(b, h.detach().numpy())
                self.optimizer.zero_grad()
                h.backward(torch.from_numpy(link.receive(b).copy()))
                self.optimizer.step()

    def eval(self) -> None:
        self.bottom.eval()

    def represent(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bottom(features)
        return out
