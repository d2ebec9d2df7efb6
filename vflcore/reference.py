"""SplitNN, FedBCD, VIMSGD, VIMADMM and VIMADMM-J in one process, with no federation in the way: the yardstick.

The same models (shapes and seeds), optimizers, batch schedule and loss as the federated
algorithm, but every party's bottom model lives here and the embeddings never leave memory. Tests
compare its per-step losses with a federated run, and the overhead benchmark compares its epoch
time. It copies the federated numerics on purpose: each passive embedding is cut out of the
graph (detach, then a leaf that requires grad) exactly where the wire cuts it, so that the two
runs agree to float32 rounding rather than merely in distribution.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Self

import numpy as np
import torch
from torch import nn

from vflcore import admm
from vflcore.data import PartyTable, select_rows
from vflcore.job import ACTIVE_PARTY, JobSpec, epoch_mean, model_seed
from vflcore.losses import label_tensor, task_loss
from vflcore.models import LinearHeads, build_seeded, job_optimizer, linear_head, mlp, seed_dropout
from vflcore.options import algorithm_options

__all__ = ["ACTIVE_PARTY", "ReferenceSplitNN", "aligned_tables"]


def aligned_tables(
    job: JobSpec, tables: Mapping[int, PartyTable]
) -> tuple[JobSpec, dict[int, torch.Tensor], torch.Tensor, np.ndarray]:
    """(job with num_rows, features per party, labels, IDs) of the rows every party holds.

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
    return replace(job, num_rows=len(ids)), features, torch.from_numpy(np.asarray(labels, dtype=np.float64)), ids


class FromTables:
    """``from_tables`` for an in-process reference whose constructor takes (job, features, labels, top_hidden)."""

    #: The aligned IDs, row by row, when built by ``from_tables``.
    ids: np.ndarray | None = None

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int],
        top_dropout: float = 0.0,
    ) -> None:
        raise NotImplementedError  # each reference defines its own

    @classmethod
    def from_tables(
        cls,
        job: JobSpec,
        tables: Mapping[int, PartyTable],
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
    ) -> Self:
        """Build from each party's table as read from its file; party 1's table holds the labels."""
        job, features, labels, ids = aligned_tables(job, tables)
        model = cls(job, features, labels, top_hidden=top_hidden, top_dropout=top_dropout)
        model.ids = ids
        return model


class ReferenceSplitNN(FromTables):
    """Every party's half of the job's algorithm (SplitNN and its relatives, by ``job.algorithm``) in one process."""

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
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
        self.vim = job.algorithm in ("vimsgd", "vimadmm")
        options = algorithm_options(job.algorithm, job.algorithm_options)
        self.local_steps = int(options.get("local_steps", 1))
        self.admm = job.algorithm == "vimadmm"
        self.joint = job.algorithm == "vimadmm_j"
        self.rho = float(options.get("rho", 1.0))
        self.duals = torch.zeros(job.num_rows, num_outputs)
        parts = len(self.bottoms)
        self.top = build_seeded(
            lambda: (
                LinearHeads(parts, job.embedding_dim, num_outputs)
                if self.vim
                else mlp(job.embedding_dim * parts, top_hidden, num_outputs, dropout=top_dropout)
            ),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        # SplitNN and FedBCD: the active party's optimizer holds top then its own bottom, as the
        # server's does. VIMSGD: the heads have their own, and every bottom model its own.
        active_params = list(self.top.parameters())
        if ACTIVE_PARTY in self.bottoms and not self.vim:
            active_params += list(self.bottoms[ACTIVE_PARTY].parameters())
        self.optimizers = [job_optimizer(job, active_params)]
        self.bottom_optimizers = {
            p: job_optimizer(job, self.bottoms[p].parameters())
            for p in self.bottoms
            if p != ACTIVE_PARTY or self.vim or self.joint
        }
        # VIMADMM-J: every party's own head, seeded as each party seeds its own.
        self.heads = {
            p: linear_head(job.embedding_dim, num_outputs, model_seed(job.seed, p, "head")) for p in self.bottoms
        }
        self.head_optimizers = {p: job_optimizer(job, head.parameters()) for p, head in self.heads.items()}
        self.optimizers += list(self.bottom_optimizers.values())
        #: The training loss of every step, in order.
        self.step_losses: list[float] = []
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def _top(self, rows: np.ndarray, passive: list[torch.Tensor], *, own: bool = True) -> torch.Tensor:
        """The server's model over [own embedding, passive embeddings in party order], as the server builds it.

        ``own=False`` cuts the active party's own embedding off the graph (VIMSGD's head update).
        """
        parts = []
        if ACTIVE_PARTY in self.bottoms:
            h = self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])
            parts.append(h if own else h.detach())
        output: torch.Tensor = self.top(parts + passive) if self.vim else self.top(torch.cat(parts + passive, dim=1))
        return output

    def train_epoch(self, epoch: int) -> float:
        """One epoch over the shared batch schedule; returns the row-weighted mean training loss."""
        for module in [self.top, *self.bottoms.values()]:
            module.train()
        return epoch_mean(self.schedule.batches(epoch), self._train_round, self.step_losses)

    def _train_round(self, rows: np.ndarray) -> float:
        """One communication round of the job's algorithm on ``rows``; returns its loss."""
        if self.joint:
            return self._joint_round(rows)
        if self.admm:
            return self._admm_round(rows)
        if self.vim:
            return self._vim_round(rows)
        return self._round(rows)

    def _round(self, rows: np.ndarray) -> float:
        """SplitNN, or FedBCD with Q = ``local_steps``: the loss of the round's first update."""
        sent = [self.bottoms[p](self.features[p][rows]) for p in self.passive]
        # Where the wire cuts the graph: the server gets a copy as a fresh leaf, computes its
        # gradient, and each passive party pushes that gradient into its own bottom model.
        received = [h.detach().clone().requires_grad_(True) for h in sent]
        active = self.optimizers[0]
        first_loss = 0.0
        for step in range(self.local_steps):  # the active party, on the embeddings it received
            active.zero_grad()
            inputs = received if step == 0 else [r.detach() for r in received]
            loss = self.loss_fn(self._top(rows, inputs), self.labels[rows])
            loss.backward()
            if step == 0:
                first_loss = loss.item()
            active.step()
        for p, h, leaf in zip(self.passive, sent, received, strict=True):  # each passive party, on its gradient
            assert leaf.grad is not None
            for step in range(self.local_steps):
                if step:
                    h = self.bottoms[p](self.features[p][rows])
                self.bottom_optimizers[p].zero_grad()
                h.backward(leaf.grad)
                self.bottom_optimizers[p].step()
        return first_loss

    def _vim_round(self, rows: np.ndarray) -> float:
        """VIMSGD (004 Eq. 11-15): the heads step first, then every bottom model under the new heads."""
        sent = [self.bottoms[p](self.features[p][rows]) for p in self.passive]
        heads = self.optimizers[0]
        heads.zero_grad()
        loss = self.loss_fn(self._top(rows, [h.detach() for h in sent], own=False), self.labels[rows])
        loss.backward()
        heads.step()
        for optimizer in self.bottom_optimizers.values():
            optimizer.zero_grad()
        self.loss_fn(self._top(rows, sent), self.labels[rows]).backward()  # through every bottom model
        for optimizer in self.bottom_optimizers.values():
            optimizer.step()
        return float(loss.item())

    def _admm_round(self, rows: np.ndarray) -> float:
        """VIMADMM (004 §3.2, Eq. 6-10): z, λ and one head step here, then τ local steps per party."""
        parties = sorted(self.bottoms)  # the active party first, as the server orders the heads
        embeddings = [self.bottoms[p](self.features[p][rows]) for p in parties]
        cut = [h.detach() for h in embeddings]
        labels = self.labels[rows]
        with torch.no_grad():
            outputs = self.top(cut)
            loss = self.loss_fn(outputs, labels)
        z = admm.solve_z(self.job.task, outputs, labels, self.duals[rows], self.rho)
        duals = admm.dual_update(self.duals[rows], outputs, z, self.rho)
        self.duals[rows] = duals
        heads = self.optimizers[0]
        heads.zero_grad()
        torch.autograd.backward(admm.consensus_loss(self.top(cut), duals, z, self.rho))
        heads.step()
        assert isinstance(self.top, LinearHeads)
        with torch.no_grad():
            contributions = [head(h) for head, h in zip(self.top.linears(), cut, strict=True)]
        slack = admm.residuals(contributions, z)
        for k, party in enumerate(parties):
            weight = self.top.linears()[k].weight.detach().clone()
            for step in range(self.local_steps):
                h = embeddings[k] if step == 0 else self.bottoms[party](self.features[party][rows])
                self.bottom_optimizers[party].zero_grad()
                torch.autograd.backward(admm.consensus_loss(h @ weight.T, duals, slack[k], self.rho))
                self.bottom_optimizers[party].step()
        return float(loss.item())

    def _joint_round(self, rows: np.ndarray) -> float:
        """VIMADMM-J (004 App. A.3, Eq. 16-20): z, λ and residuals here, τ joint local steps per party."""
        parties = sorted(self.bottoms)
        embeddings = [self.bottoms[p](self.features[p][rows]) for p in parties]
        labels = self.labels[rows]
        with torch.no_grad():
            contributions = [self.heads[p](h) for p, h in zip(parties, embeddings, strict=True)]
            outputs = torch.stack(contributions).sum(dim=0)
            loss = self.loss_fn(outputs, labels)
        z = admm.solve_z(self.job.task, outputs, labels, self.duals[rows], self.rho)
        duals = admm.dual_update(self.duals[rows], outputs, z, self.rho)
        self.duals[rows] = duals
        slack = admm.residuals(contributions, z)
        for k, party in enumerate(parties):
            for step in range(self.local_steps):
                h = embeddings[k] if step == 0 else self.bottoms[party](self.features[party][rows])
                admm.joint_local_step(
                    h,
                    self.heads[party],
                    self.head_optimizers[party],
                    self.bottom_optimizers[party],
                    duals,
                    slack[k],
                    self.rho,
                )
        return float(loss.item())

    def head_norms(self) -> dict[int, float]:
        """VIMSGD's client importance: ‖W_k‖ per party, as the server reports it."""
        assert isinstance(self.top, LinearHeads)
        return dict(zip(sorted(self.bottoms), self.top.norms(), strict=True))

    @torch.no_grad()
    def predict(self, rows: np.ndarray) -> torch.Tensor:
        """The split model's output (logits, or predictions for regression) on aligned ``rows``."""
        for module in [self.top, *self.bottoms.values()]:
            module.eval()
        if self.joint:
            return torch.stack(
                [self.heads[p](self.bottoms[p](self.features[p][rows])) for p in sorted(self.bottoms)]
            ).sum(0)
        return self._top(rows, [self.bottoms[p](self.features[p][rows]) for p in self.passive])
