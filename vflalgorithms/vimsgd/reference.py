"""VIMSGD in one process: linear heads W_k, stepped from one backward pass with the bottom models (004 Eq. 11-15)."""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.splitnn.reference import ReferenceSplitNNFamily
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.models import LinearHeads, build_seeded, seed_dropout
from vflcore.ml.optimizers import role_optimizer


class ReferenceVIMSGD(ReferenceSplitNNFamily):
    """The server's model is Σ_k h^k W_k; one backward pass steps the heads and every bottom model."""

    algorithms: tuple[str, ...] = ("vimsgd",)

    def _build(self) -> None:
        """The linear heads W_k (the server's model), and one optimizer per head set and per bottom model."""
        super()._build()
        job = self.job
        parts = len(self.bottoms)
        heads = build_seeded(
            lambda: LinearHeads(parts, job.embedding_dim, self.num_outputs), model_seed(job.seed, ACTIVE_PARTY, "top")
        )
        self.top = cast(LinearHeads, heads)
        # The heads have their own optimizer, and every bottom model its own (the own one too).
        self.heads_optimizer = role_optimizer(job, "top", self.top.parameters())
        self.bottom_optimizers = {
            p: role_optimizer(job, "bottom", model.parameters()) for p, model in self.bottoms.items()
        }
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def _models(self) -> list[nn.Module]:
        return [self.top, *super()._models()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(own + passive)
        return output

    def _train_round(self, rows: np.ndarray) -> float:
        """VIMSGD as its authors run it: one backward pass under the round's heads, then every model steps."""
        sent = [self.bottoms[p](self.features[p][rows]) for p in self.passive]
        received = [h.detach().requires_grad_(True) for h in sent]
        own = [self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])] if ACTIVE_PARTY in self.bottoms else []
        own_leaf = [h.detach().requires_grad_(True) for h in own]
        heads = self.heads_optimizer
        heads.zero_grad()
        loss = self.loss_fn(self._forward(own_leaf, received), self.labels[rows])
        loss.backward()
        heads.step()
        parties = [*([ACTIVE_PARTY] if own else []), *self.passive]
        for party, h, leaf in zip(parties, own + sent, own_leaf + received, strict=True):
            optimizer = self.bottom_optimizers[party]
            optimizer.zero_grad()
            h.backward(leaf.grad)
            optimizer.step()
        return float(loss.item())
