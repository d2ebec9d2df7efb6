"""VIMADMM in one process (004 §3.2, Eq. 6-10): z, λ and one head step, then τ local steps per party."""

from __future__ import annotations

import numpy as np
import torch

from vflalgorithms.splitnn.reference import ReferenceSplitNNFamily
from vflalgorithms.vimadmm import maths as admm
from vflalgorithms.vimsgd.reference import ReferenceVIMSGD


def admm_state(reference: ReferenceSplitNNFamily) -> tuple[float, int, torch.Tensor]:
    """ρ, τ, and the duals λ of every aligned row (zeros at the start), as the server keeps them
    across epochs: what both ADMM references (VIMADMM's and VIMADMM-J's) set up alike."""
    rho, local_steps = float(reference.options["rho"]), int(reference.options["local_steps"])
    return rho, local_steps, torch.zeros(reference.job.num_rows, reference.num_outputs)


class ReferenceVIMADMM(ReferenceVIMSGD):
    """The heads and duals as the server keeps them; each party's τ local steps on Eq. 10."""

    algorithms = ("vimadmm",)

    def _build(self) -> None:
        """ρ, τ, and the duals λ of every aligned row, as the server keeps them across epochs."""
        super()._build()
        self.rho, self.local_steps, self.duals = admm_state(self)

    def _train_round(self, rows: np.ndarray) -> float:
        """VIMADMM (004 §3.2, Eq. 6-10): z, λ and one head step here, then τ local steps per party."""
        parties = sorted(self.bottoms)  # the active party first, as the server orders the heads
        embeddings = [self.bottoms[p](self.features[p][rows]) for p in parties]
        cut = [h.detach() for h in embeddings]
        labels = self.labels[rows]
        with torch.no_grad():
            contributions = [head(h) for head, h in zip(self.top.linears(), cut, strict=True)]
            outputs = torch.stack(contributions).sum(dim=0)
            loss = self.loss_fn(outputs, labels)
        z = admm.solve_z(self.job.task, outputs, labels, self.duals[rows], self.rho)
        duals = admm.dual_update(self.duals[rows], outputs, z, self.rho)
        self.duals[rows] = duals
        slack = admm.residuals(contributions, z)  # from the outputs before the heads' step, as the authors'
        heads = self.heads_optimizer
        heads.zero_grad()
        torch.autograd.backward(admm.consensus_loss(self.top(cut), duals, z, self.rho))
        heads.step()
        for k, party in enumerate(parties):
            weight = self.top.linears()[k].weight.detach().clone()
            for step in range(self.local_steps):
                h = embeddings[k] if step == 0 else self.bottoms[party](self.features[party][rows])
                self.bottom_optimizers[party].zero_grad()
                torch.autograd.backward(admm.consensus_loss(h @ weight.T, duals, slack[k], self.rho))
                self.bottom_optimizers[party].step()
        return float(loss.item())
