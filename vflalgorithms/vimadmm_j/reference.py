"""VIMADMM-J in one process (004 App. A.3, Eq. 16-20): every party's own head, ADMM state in the middle."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vflalgorithms.splitnn.reference import ReferenceSplitNNFamily
from vflalgorithms.vimadmm import maths as admm
from vflalgorithms.vimadmm.reference import admm_state
from vflcore.job.schedule import model_seed
from vflcore.ml.models import linear_head, seed_dropout
from vflcore.ml.optimizers import role_optimizer


class ReferenceVIMADMMJ(ReferenceSplitNNFamily):
    """z, λ and residuals as the server computes them; τ joint local steps per party (head and bottom at once)."""

    algorithms = ("vimadmm_j",)

    def _build(self) -> None:
        """ρ, τ, the duals, and every party's own head W_k with its optimizer."""
        super()._build()
        job = self.job
        self.rho, self.local_steps, self.duals = admm_state(self)
        # Every party's own head, seeded as each party seeds its own; each model its own optimizer.
        self.heads: dict[int, nn.Linear] = {
            p: linear_head(job.embedding_dim, self.num_outputs, model_seed(job.seed, p, "head")) for p in self.bottoms
        }
        self.head_optimizers = {p: role_optimizer(job, "top", head.parameters()) for p, head in self.heads.items()}
        self.bottom_optimizers = {
            p: role_optimizer(job, "bottom", model.parameters()) for p, model in self.bottoms.items()
        }
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def _models(self) -> list[nn.Module]:
        return [*super()._models(), *self.heads.values()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        """The prediction: every party's logits h^k W_k, summed (the active party's first, if it has features)."""
        embeddings = own + passive
        return torch.stack([self.heads[p](h) for p, h in zip(sorted(self.bottoms), embeddings, strict=True)]).sum(0)

    def _train_round(self, rows: np.ndarray) -> float:
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
