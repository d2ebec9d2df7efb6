"""SplitNN in one process, and the base its relatives' references build on: the yardstick.

What a reference is, and why it copies the federated numerics to the float32 rounding, is in
``vflalgorithms.reference``.

``ReferenceSplitNNFamily`` holds what every member's reference shares (each party's bottom
model, the server's model as ``_forward``, the epoch loop); ``ReferenceSplitNN`` (and so
FedBCD's), ``ReferenceVIMSGD`` (and VIMADMM's) and ``ReferenceVIMADMMJ`` add their own server
models, optimizers and round.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.reference import FromTables
from vflalgorithms.splitnn.overlap import overlap_options, part_bounds
from vflcore.job.schedule import epoch_mean, model_seed
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.models import build_seeded, mlp, seed_dropout
from vflcore.ml.optimizers import role_optimizer

__all__ = ["ReferenceSplitNN", "ReferenceSplitNNFamily"]


class ReferenceSplitNNFamily(FromTables, ABC):
    """Every party's bottom model, seeded as each party seeds its own, and one round per batch."""

    #: Updates per round on the round's embeddings: FedBCD's Q, VIMADMM's τ.
    local_steps = 1

    def _build(self) -> None:
        """Every party's bottom model, seeded as each party seeds its own."""
        super()._build()
        job = self.job
        self.bottoms: dict[int, nn.Module] = {}
        for party in [ACTIVE_PARTY, *self.passive]:
            width = self.features[party].shape[1]
            if width:  # an active party without features of its own has no bottom model
                factory = functools.partial(mlp, width, job.bottom_hidden, job.embedding_dim)
                self.bottoms[party] = build_seeded(factory, model_seed(job.seed, party, "bottom"))

    @abstractmethod
    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        """The server's model on [h^1 if any] + every passive embedding in party order, as the server builds it."""

    @abstractmethod
    def _train_round(self, rows: np.ndarray) -> float:
        """One communication round of the job's algorithm on ``rows``; returns its loss."""

    def _models(self) -> list[nn.Module]:
        """Every model trained here, for train and eval mode."""
        return list(self.bottoms.values())

    def _top(self, rows: np.ndarray, passive: list[torch.Tensor]) -> torch.Tensor:
        """The server's model over [own embedding, passive embeddings in party order], as the server builds it."""
        own = [self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])] if ACTIVE_PARTY in self.bottoms else []
        return self._forward(own, passive)

    def train_epoch(self, epoch: int) -> float:
        """One epoch over the shared batch schedule; returns the row-weighted mean training loss."""
        for module in self._models():
            module.train()
        return epoch_mean(self.schedule.batches(epoch), self._train_round, self.step_losses)

    @torch.no_grad()
    def predict(self, rows: np.ndarray) -> torch.Tensor:
        """The split model's output (logits, or predictions for regression) on aligned ``rows``."""
        for module in self._models():
            module.eval()
        return self._top(rows, [self.bottoms[p](self.features[p][rows]) for p in self.passive])


class ReferenceSplitNN(ReferenceSplitNNFamily):
    """Every party's half of SplitNN in one process; FedBCD's builds on it."""

    algorithms: tuple[str, ...] = ("splitnn",)

    def _build(self) -> None:
        """The top model over the concatenated embeddings, and the optimizers as the parties hold them."""
        super()._build()
        job = self.job
        self.micro_batches = overlap_options(self.options).micro_batches
        parts = len(self.bottoms)
        self.top = build_seeded(
            lambda: mlp(job.embedding_dim * parts, self.top_hidden, self.num_outputs, dropout=self.top_dropout),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        # The top model's optimizer, and every bottom model's (the own one too), as the parties hold them.
        self.optimizer = role_optimizer(job, "top", self.top.parameters())
        self.bottom_optimizers = {p: role_optimizer(job, "bottom", m.parameters()) for p, m in self.bottoms.items()}
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def _models(self) -> list[nn.Module]:
        return [self.top, *super()._models()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(torch.cat(own + passive, dim=1))
        return output

    def _train_round(self, rows: np.ndarray) -> float:
        """SplitNN, or FedBCD with Q = ``local_steps``, as the daemons run it: the loss of the round's update.

        Where the wire cuts the graph, the server gets a copy of each h^k as a fresh leaf, computes
        its gradient, and each passive party pushes that gradient into its own bottom model. The
        server's operations come in the server's order: h^1 of the whole batch cut off as a leaf;
        per part of the batch (one, unless ``micro_batches``: ``vflalgorithms.splitnn.overlap``)
        the top model on that part of h^1 and of every h^k, its loss scaled by the part's share of
        the rows, backward; then the top model's one step, and h^1's gradient into the own bottom
        model. Every bottom model (the own one too) back-propagates its gradient and steps, then
        takes FedBCD's Q - 1 further steps with the same gradient into h recomputed from its weights.
        """
        bounds = part_bounds(len(rows), self.micro_batches)
        whole = len(bounds) == 1
        sent = {p: [self.bottoms[p](self.features[p][rows][a:b]) for a, b in bounds] for p in self.passive}
        received = {p: [h.detach().clone().requires_grad_(True) for h in sent[p]] for p in self.passive}
        for optimizer in (self.optimizer, *self.bottom_optimizers.values()):
            optimizer.zero_grad()
        own = [self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])] if ACTIVE_PARTY in self.bottoms else []
        own_leaf = [h.detach().requires_grad_(True) for h in own]
        total = 0.0
        for i, (a, b) in enumerate(bounds):
            share = [h if whole else h[a:b] for h in own_leaf]
            loss = self.loss_fn(self._forward(share, [received[p][i] for p in self.passive]), self.labels[rows[a:b]])
            if not whole:
                loss = loss * ((b - a) / len(rows))
            loss.backward()
            total += loss.item()
        self.optimizer.step()
        if own:
            self._local_steps(ACTIVE_PARTY, rows, own, [own_leaf[0].grad])
        for p in self.passive:
            self._local_steps(p, rows, sent[p], [leaf.grad for leaf in received[p]])
        return total

    def _local_steps(
        self, party: int, rows: np.ndarray, sent: list[torch.Tensor], gradients: list[torch.Tensor | None]
    ) -> None:
        """A bottom model's update from its gradients (one per part), then FedBCD's Q - 1 on the same gradient."""
        optimizer = self.bottom_optimizers[party]
        received = [cast(torch.Tensor, g) for g in gradients]
        for h, gradient in zip(sent, received, strict=True):  # part by part, as the party does
            torch.autograd.backward(h, gradient)
        optimizer.step()
        gradient = received[0] if len(received) == 1 else torch.cat(received)
        for _ in range(1, self.local_steps):
            optimizer.zero_grad()
            torch.autograd.backward(self.bottoms[party](self.features[party][rows]), gradient)
            optimizer.step()
