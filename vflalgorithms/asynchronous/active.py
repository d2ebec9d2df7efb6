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

Checkpoints inside an epoch (``[job] checkpoint_every_steps``) need a moment when every party
has done the same batches: at each such batch count the server holds back every later upload
until the slowest party is there, saves, and goes on. Each passive party saves the same count
by itself after its own step, so a resumed job starts every party at that batch.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from vflalgorithms.asynchronous.spec import WARMUP_EMBEDDING
from vflalgorithms.contexts import ActiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.active import SplitNNServer
from vflcore.job.schedule import mid_epoch_checkpoint_due
from vflcore.wire.names import EMBEDDING
from vflcore.work_items import TrainEpoch


class AsyncServer(SplitNNServer):
    """SplitNN's models and round, trained on each party's uploads as they arrive.

    Its forward exchange is its own epoch loop (``train_epoch``): one round per upload, with the
    other parties' cached embeddings, and the answer sent to the sender only.
    """

    name = "async"
    #: The cached embeddings and the warm-up flag: a resumed job neither warms up again nor forgets.
    checkpointed: tuple[str, ...] = (*SplitNNServer.checkpointed, "cache", "_warm", "arrivals")
    #: At the batch counts where a checkpoint is due, every party has done the same batches.
    resumes_mid_epoch = True
    scores_inside_epoch = True
    #: One step per upload, in arrival order: batches cross whole (no ``micro_batches`` option).
    splits_batches = False

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        self.max_staleness = int(job_options(job)["max_staleness"])
        # The thesis divides the master's learning rate by the number of workers (002 §5.4.2).
        for optimizer in (self.optimizer, self.bottom_optimizer):
            for group in optimizer.param_groups if optimizer is not None else []:
                group["lr"] = group["lr"] / len(job.passive_parties)
        self.cache = {p: torch.zeros(job.num_rows, job.embedding_dim, device=ctx.device) for p in job.passive_parties}
        self._warm = False
        #: Per processed upload: (party, batch, batches the slowest party had done then).
        self.arrivals: list[tuple[int, int, int]] = []

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        ctx, fed = self.ctx, self.ctx.parties
        parties = sorted(ctx.job.passive_parties)
        batches = ctx.schedule.batches(epoch)
        train_rows = ctx.schedule.train_rows
        if not self._warm:
            for party in parties:
                fed.expect(WARMUP_EMBEDDING, epoch, 0, (len(train_rows), ctx.job.embedding_dim), party=party)
        for b in range(first_batch, len(batches)):
            fed.expect(EMBEDDING, epoch, b, (len(batches[b]), ctx.job.embedding_dim))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch, first_batch))
        if not self._warm:
            for party, warmup in fed.gather(WARMUP_EMBEDDING, epoch, 0).items():
                self.cache[party][torch.from_numpy(train_rows)] = ctx.tensor(warmup)
            self._warm = True
        self._train_mode()
        done = dict.fromkeys(parties, first_batch)
        held: dict[int, tuple[int, np.ndarray]] = {}
        for _ in range(len(parties) * (len(batches) - first_batch)):
            party, b, h = self._next(epoch, done, held, len(batches))
            rows = batches[b]
            index = torch.from_numpy(rows)
            fresh = ctx.tensor(h)
            self.cache[party][index] = fresh
            passive = [fresh if p == party else self.cache[p][index].clone() for p in parties]
            own = self._own(rows)
            publish = functools.partial(self._publish_to, epoch, b, party, parties.index(party), rows)
            value = self._round(own, passive, rows, publish=publish)
            slowest = min(done.values())
            self.arrivals.append((party, b, slowest))
            done[party] += 1
            self.record_step(value)
            if min(done.values()) > slowest:  # every party has now done this many batches
                ctx.after_step(epoch, min(done.values()), len(batches))
        return self._epoch_loss(batches, len(parties))

    def _epoch_loss(self, batches: list[np.ndarray], parties: int) -> float:
        """The row-weighted mean loss of the epoch's uploads, in arrival order, resumed or not."""
        steps = len(batches) * parties
        total = 0.0
        for (_, b, _), value in zip(self.arrivals[-steps:], self.step_losses[-steps:], strict=True):
            total += value * len(batches[b])
        return total / max(1, parties * sum(len(rows) for rows in batches))

    def _next(
        self, epoch: int, done: dict[int, int], held: dict[int, tuple[int, np.ndarray]], per_epoch: int
    ) -> tuple[int, int, np.ndarray]:
        """The next upload to train on: a held-back one that is now within bounds, else the next arrival."""
        while True:
            slowest = min(done.values())
            for party, (b, h) in list(held.items()):
                if self._may_train(epoch, b, slowest, per_epoch):
                    del held[party]
                    return party, b, h
            party, b, h = self.ctx.parties.next_arrival(EMBEDDING, epoch)
            if not self._may_train(epoch, b, slowest, per_epoch):
                held[party] = (b, h)  # the party waits for its gradient until the others catch up
                continue
            return party, b, h

    def _may_train(self, epoch: int, batch: int, slowest: int, per_epoch: int) -> bool:
        """Whether an upload of ``batch`` may be trained on while the slowest party has done ``slowest``.

        Not while it is more than ``max_staleness`` ahead, nor past a batch count where a
        checkpoint is due that the slowest party has not reached: every party must be there.
        """
        if batch - slowest > self.max_staleness:
            return False
        job = self.ctx.job
        return not any(mid_epoch_checkpoint_due(job, epoch, n, per_epoch) for n in range(slowest + 1, batch + 1))

    def _publish_to(
        self,
        epoch: int,
        batch: int,
        party: int,
        position: int,
        rows: np.ndarray,
        answers: list[dict[str, torch.Tensor]],
    ) -> None:
        """Only the sender gets a gradient: the others' embeddings were cached, not sent."""
        self._publish(epoch, batch, [party], rows, [answers[position]])
