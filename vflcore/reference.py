"""SplitNN trained in one process, with no federation in the way: the yardstick for the real thing.

The same models (shapes and seeds), optimizers, batch schedule and loss as the federated
SplitNN, but every party's bottom model lives here and the embeddings never leave memory. Tests
compare its per-step losses with a federated run, and the overhead benchmark compares its epoch
time. It copies the federated numerics on purpose: each passive embedding is cut out of the
graph (detach, then a leaf that requires grad) exactly where the wire cuts it, so that the two
runs agree to float32 rounding rather than merely in distribution.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from vflcore.data import PartyTable, select_rows
from vflcore.job import JobSpec, model_seed
from vflcore.losses import label_tensor, task_loss
from vflcore.models import build_seeded, make_optimizer, mlp

__all__ = ["ACTIVE_PARTY", "ReferenceSplitNN"]

ACTIVE_PARTY = 1


class ReferenceSplitNN:
    """Every party's half of SplitNN (concatenation aggregation) in one process."""

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int] = (64,),
    ) -> None:
        """``features`` maps party id to its aligned float32 rows; party 1 (active) may have 0 columns."""
        if job.num_rows < 1:
            raise ValueError("job.num_rows must be set to the number of aligned rows")
        expected = {ACTIVE_PARTY, *job.passive_parties}
        if set(features) != expected:
            raise ValueError(f"features are for parties {sorted(features)}, the job has {sorted(expected)}")
        if any(len(x) != job.num_rows for x in features.values()):
            raise ValueError(f"every party's features must have job.num_rows = {job.num_rows} rows")
        self.job = job
        self.schedule = job.schedule()
        self.features = dict(features)
        self.labels, num_outputs = label_tensor(job.task, labels)
        self.loss_fn = task_loss(job.task)
        self.passive = sorted(job.passive_parties)

        self.bottoms: dict[int, nn.Module] = {}
        for party in [ACTIVE_PARTY, *self.passive]:
            width = self.features[party].shape[1]
            if width:  # an active party without features of its own has no bottom model
                factory = functools.partial(mlp, width, job.bottom_hidden, job.embedding_dim)
                self.bottoms[party] = build_seeded(factory, model_seed(job.seed, party, "bottom"))
        top_width = job.embedding_dim * len(self.bottoms)
        self.top = build_seeded(
            lambda: mlp(top_width, top_hidden, num_outputs), model_seed(job.seed, ACTIVE_PARTY, "top")
        )
        # The active party's optimizer holds top then its own bottom, as the server's does.
        active_params = list(self.top.parameters())
        if ACTIVE_PARTY in self.bottoms:
            active_params += list(self.bottoms[ACTIVE_PARTY].parameters())
        self.optimizers = [make_optimizer(job.optimizer, active_params, job.learning_rate)]
        self.optimizers += [
            make_optimizer(job.optimizer, self.bottoms[p].parameters(), job.learning_rate) for p in self.passive
        ]
        #: The training loss of every step, in order.
        self.step_losses: list[float] = []
        #: The aligned IDs, row by row, when built by ``from_tables``.
        self.ids: np.ndarray | None = None

    @classmethod
    def from_tables(
        cls, job: JobSpec, tables: Mapping[int, PartyTable], *, top_hidden: Sequence[int] = (64,)
    ) -> ReferenceSplitNN:
        """Build from each party's table as read from its file; party 1's table holds the labels.

        Rows are aligned in plaintext, to what PSI agrees on: the IDs every party holds, ordered
        by their UTF-8 bytes (for ``str`` that is the same as Python's string order).
        """
        common = sorted(set.intersection(*(set(table.ids.tolist()) for table in tables.values())))
        if not common:
            raise ValueError("the parties' tables share no ID")
        ids = np.asarray(common, dtype=object)
        aligned = {party: select_rows(table, ids) for party, table in tables.items()}
        labels = aligned[ACTIVE_PARTY].labels
        if labels is None:
            raise ValueError("party 1's table needs a label column")
        features = {
            party: torch.from_numpy(np.ascontiguousarray(table.features, dtype=np.float32))
            for party, table in aligned.items()
        }
        job = replace(job, num_rows=len(ids))
        model = cls(job, features, torch.from_numpy(np.asarray(labels, dtype=np.float64)), top_hidden=top_hidden)
        model.ids = ids
        return model

    def _top(self, rows: np.ndarray, passive: list[torch.Tensor]) -> torch.Tensor:
        """The top model over [own embedding, passive embeddings in party order], as the server builds it."""
        parts = [self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])] if ACTIVE_PARTY in self.bottoms else []
        output: torch.Tensor = self.top(torch.cat(parts + passive, dim=1))
        return output

    def train_epoch(self, epoch: int) -> float:
        """One epoch over the shared batch schedule; returns the row-weighted mean training loss."""
        for module in [self.top, *self.bottoms.values()]:
            module.train()
        batches = self.schedule.batches(epoch)
        total = 0.0
        for rows in batches:
            for optimizer in self.optimizers:
                optimizer.zero_grad()
            sent = [self.bottoms[p](self.features[p][rows]) for p in self.passive]
            # Where the wire cuts the graph: the server gets a copy as a fresh leaf, computes its
            # gradient, and each passive party pushes that gradient into its own bottom model.
            received = [h.detach().clone().requires_grad_(True) for h in sent]
            loss = self.loss_fn(self._top(rows, received), self.labels[rows])
            loss.backward()
            for h, leaf in zip(sent, received, strict=True):
                assert leaf.grad is not None
                h.backward(leaf.grad)
            for optimizer in self.optimizers:
                optimizer.step()
            value = loss.item()
            self.step_losses.append(value)
            total += value * len(rows)
        return total / max(1, sum(len(rows) for rows in batches))

    @torch.no_grad()
    def predict(self, rows: np.ndarray) -> torch.Tensor:
        """The split model's output (logits, or predictions for regression) on aligned ``rows``."""
        for module in [self.top, *self.bottoms.values()]:
            module.eval()
        return self._top(rows, [self.bottoms[p](self.features[p][rows]) for p in self.passive])
