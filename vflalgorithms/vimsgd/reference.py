"""VIMSGD in one process: linear heads W_k on the server, stepped before the bottom models (004 Eq. 11-15)."""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.splitnn.reference import ReferenceSplitNNFamily
from vflcore.job import ACTIVE_PARTY, model_seed
from vflcore.ml.models import LinearHeads, build_seeded, job_optimizer, seed_dropout


class ReferenceVIMSGD(ReferenceSplitNNFamily):
    """The server's model is Σ_k h^k W_k; the heads step first, then every bottom model under the new heads."""

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
        self.heads_optimizer = job_optimizer(job, self.top.parameters())
        self.bottom_optimizers = {p: job_optimizer(job, model.parameters()) for p, model in self.bottoms.items()}
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def _models(self) -> list[nn.Module]:
        return [self.top, *super()._models()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(own + passive)
        return output

    def _train_round(self, rows: np.ndarray) -> float:
        """VIMSGD (004 Eq. 11-15): the heads step first, then every bottom model under the new heads."""
        sent = [self.bottoms[p](self.features[p][rows]) for p in self.passive]
        heads = self.heads_optimizer
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
