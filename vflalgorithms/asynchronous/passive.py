"""Asynchronous VFL, a passive party's half (thesis 002 §5.4.2).

Before its first epoch the party sends its embedding of every training row once, so that the
server can train on any party's batch with the others' cached embeddings. Then it works
through its batches exactly as in SplitNN, at its own pace: the server answers each upload as
it arrives, not when every party has sent. Only the server's side differs beyond that.
"""

from __future__ import annotations

import torch

from vflalgorithms.asynchronous.spec import WARMUP_EMBEDDING
from vflalgorithms.contexts import PassiveContext
from vflalgorithms.splitnn.passive import SplitNNClient
from vflcore.wire.tensors import TensorKey


class AsyncClient(SplitNNClient):
    """SplitNN's client half, after one warm-up upload of every training row."""

    name = "async"
    checkpointed: tuple[str, ...] = (*SplitNNClient.checkpointed, "_warm")

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        self._warm = False  # the warm-up upload happens once, before the first epoch

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        if not self._warm:
            rows = self.ctx.schedule.train_rows
            with torch.no_grad():
                self.bottom.train()
                warmup = self.bottom(self.ctx.features[rows]).cpu().numpy()
            self.ctx.link.send(TensorKey(self.ctx.job.job_id, epoch, 0, WARMUP_EMBEDDING), warmup)
            self._warm = True
        super().train_epoch(epoch, first_batch)
