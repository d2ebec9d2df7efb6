"""Asynchronous VFL, the active party's half (thesis 002 §5.4.2).

The server never waits for every party. It keeps each party's latest embedding of every
training row: a warm-up pass fills this cache before the first epoch, and every upload
refreshes it. Each upload is trained on as it arrives, in arrival order: the sender's fresh
h^k with the other parties' cached (stale) embeddings of the same rows; the gradient goes back
to the sender only, and the server's learning rate is divided by the number of passive
parties, since it now steps once per party per batch.

Staleness is bounded: a party's upload for batch b is held back (so the party waits for its
gradient) while b is more than ``[algorithm] max_staleness`` batches ahead of the slowest
party's progress in the epoch. A delayed party therefore slows the others only once they are
that far ahead of it.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from vflalgorithms.asynchronous.spec import WARMUP_EMBEDDING
from vflalgorithms.base import ActiveContext, job_options
from vflalgorithms.splitnn.active import SplitNNServer
from vflcore.tasks import TrainEpoch
from vflcore.wire.names import EMBEDDING


class AsyncServer(SplitNNServer):
    """SplitNN's models, trained on each party's uploads as they arrive."""

    name = "async"
    #: The cached embeddings and the warm-up flag: a resumed job neither warms up again nor forgets.
    checkpointed: tuple[str, ...] = (*SplitNNServer.checkpointed, "cache", "_warm", "arrivals")
    #: Uploads are taken in arrival order, so "batch b of epoch e" is no place to resume at.
    resumes_mid_epoch = False

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        self.max_staleness = int(job_options(job)["max_staleness"])
        for group in self.optimizer.param_groups:
            group["lr"] = job.learning_rate / len(job.passive_parties)
        self.cache = {p: torch.zeros(job.num_rows, job.embedding_dim) for p in job.passive_parties}
        self._warm = False
        #: Per processed upload: (party, batch, batches the slowest party had done then).
        self.arrivals: list[tuple[int, int, int]] = []

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        assert first_batch == 0, "resumes only at the start of an epoch"
        ctx, fed = self.ctx, self.ctx.parties
        parties = sorted(ctx.job.passive_parties)
        batches = ctx.schedule.batches(epoch)
        train_rows = ctx.schedule.train_rows
        if not self._warm:
            for party in parties:
                fed.expect(WARMUP_EMBEDDING, epoch, 0, (len(train_rows), ctx.job.embedding_dim), party=party)
        for b, rows in enumerate(batches):
            fed.expect(EMBEDDING, epoch, b, (len(rows), ctx.job.embedding_dim))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch))
        if not self._warm:
            for party, warmup in fed.gather(WARMUP_EMBEDDING, epoch, 0).items():
                self.cache[party][torch.from_numpy(train_rows)] = torch.from_numpy(warmup.copy())
            self._warm = True
        self.top.train()
        if self.bottom is not None:
            self.bottom.train()
        done = dict.fromkeys(parties, 0)
        held: dict[int, tuple[int, np.ndarray]] = {}
        total, rows_seen = 0.0, 0
        for _ in range(len(parties) * len(batches)):
            party, b, h = self._next(epoch, done, held)
            rows = batches[b]
            index = torch.from_numpy(rows)
            fresh = torch.from_numpy(h.copy())
            self.cache[party][index] = fresh
            passive = [fresh if p == party else self.cache[p][index].clone() for p in parties]
            own = self._own(rows)
            publish = functools.partial(self._publish_to, epoch, b, party, parties.index(party))
            value = self._round(own, passive, rows, publish=publish)
            self.arrivals.append((party, b, min(done.values())))
            done[party] += 1
            self.record_step(value)
            total += value * len(rows)
            rows_seen += len(rows)
        return total / max(1, rows_seen)

    def _next(
        self, epoch: int, done: dict[int, int], held: dict[int, tuple[int, np.ndarray]]
    ) -> tuple[int, int, np.ndarray]:
        """The next upload to train on: a held-back one that is now within bounds, else the next arrival."""
        while True:
            slowest = min(done.values())
            for party, (b, h) in list(held.items()):
                if b - slowest <= self.max_staleness:
                    del held[party]
                    return party, b, h
            party, b, h = self.ctx.parties.next_arrival(EMBEDDING, epoch)
            if b - slowest > self.max_staleness:
                held[party] = (b, h)  # the party waits for its gradient until the others catch up
                continue
            return party, b, h

    def _publish_to(
        self, epoch: int, batch: int, party: int, position: int, answers: list[dict[str, torch.Tensor]]
    ) -> None:
        """Only the sender gets a gradient: the others' embeddings were cached, not sent."""
        self._publish(epoch, batch, [party], [answers[position]])
