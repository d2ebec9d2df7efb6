"""VIMADMM-J in one process (004 App. A.3, Eq. 16-20): every party's own head, ADMM state in the middle."""

from __future__ import annotations

import numpy as np
import torch

from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflalgorithms.vimadmm import maths as admm


class ReferenceVIMADMMJ(ReferenceSplitNN):
    """z, λ and residuals as the server computes them; τ joint local steps (head, then bottom) per party."""

    algorithms = ("vimadmm_j",)
    joint = True

    def _train_round(self, rows: np.ndarray) -> float:
        return self._joint_round(rows)

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
