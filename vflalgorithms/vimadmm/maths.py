"""VIMADMM's mathematics (004 §3.2, Eq. 6-10), shared by the server, the clients and the reference.

Notation, per batch B of b samples, d_c model outputs and M embeddings (one per party):

- o_j = Σ_k h_j^k W_k, the server's output for sample j (``LinearHeads``);
- z_j, an auxiliary variable per sample that ADMM keeps close to o_j (Eq. 3);
- λ_j, the dual variable per sample, kept by the server across epochs (Eq. 7);
- s_j^k = z_j − Σ_{i≠k} h_j^i W_i, the residual client k must explain (Eq. 9).

The paper writes Eq. 8 and 10 as sums over the batch. Here they are means over the batch, so
that the optimizer's learning rate means the same for any batch size (a constant rescaling of
the objective, the usual choice for stochastic ADMM). Eq. 6 is separable per sample and solved
exactly; the paper's regularisers (β R) are left to the optimizer's own settings.
"""

from __future__ import annotations

import torch
from torch import nn

#: Newton's method stops when every sample's gradient is below this (float64), or after MAX_NEWTON.
NEWTON_TOLERANCE = 1e-10
MAX_NEWTON = 50


def solve_z(task: str, outputs: torch.Tensor, labels: torch.Tensor, duals: torch.Tensor, rho: float) -> torch.Tensor:
    """Eq. 6: z_j = argmin_z ℓ(z, y_j) − λ_jᵀ z + ρ/2 ‖o_j − z‖², for every sample of the batch.

    Regression (ℓ = (z − y)², as MSE per sample) has a closed form. For classification (ℓ =
    cross-entropy on logits z) the objective is smooth and ρ-strongly convex, so a damped Newton
    method converges from any start, quadratically near the solution; each sample's Hessian is
    diag(p) − p pᵀ + ρI with p = softmax(z). Computed in float64, returned as float32.
    """
    o, lam = outputs.detach().double(), duals.detach().double()
    if task == "regression":
        y = labels.detach().double().reshape(o.shape)
        return ((2 * y + lam + rho * o) / (2 + rho)).float()
    if task != "classification":
        raise ValueError(f"unknown task {task!r}")
    onehot = torch.nn.functional.one_hot(labels.detach().long(), o.shape[1]).double()

    def objective(z: torch.Tensor) -> torch.Tensor:
        ce = torch.logsumexp(z, dim=1) - (onehot * z).sum(dim=1)
        return ce - (lam * z).sum(dim=1) + rho / 2 * ((o - z) ** 2).sum(dim=1)

    z = o + lam / rho  # the minimiser without the loss term
    eye = torch.eye(o.shape[1], dtype=torch.float64, device=o.device)
    for _ in range(MAX_NEWTON):
        p = torch.softmax(z, dim=1)
        gradient = p - onehot - lam + rho * (z - o)
        if float(gradient.abs().max()) < NEWTON_TOLERANCE:
            break
        hessian = torch.diag_embed(p) - p.unsqueeze(2) * p.unsqueeze(1) + rho * eye
        step = torch.linalg.solve(hessian, gradient.unsqueeze(2)).squeeze(2)
        # Backtracking per sample: halve the step until the objective does not increase.
        scale = torch.ones(len(z), 1, dtype=torch.float64, device=z.device)
        before = objective(z)
        for _ in range(30):
            worse = objective(z - scale * step) > before + 1e-15
            if not bool(worse.any()):
                break
            scale[worse] /= 2
        z = z - scale * step
    return z.float()


def dual_update(duals: torch.Tensor, outputs: torch.Tensor, z: torch.Tensor, rho: float) -> torch.Tensor:
    """Eq. 7: λ_j ← λ_j + ρ (o_j − z_j)."""
    return duals + rho * (outputs.detach() - z)


def consensus_loss(outputs: torch.Tensor, duals: torch.Tensor, z: torch.Tensor, rho: float) -> torch.Tensor:
    """The part of Eq. 8 and 10 that depends on the model: mean_j [λ_jᵀ o_j + ρ/2 ‖o_j − z_j‖²].

    For the heads (Eq. 8), ``outputs`` is Σ_k h^k W_k with every W_k free; its gradient for each
    W_k equals that of Eq. 8 with the other heads held at their current values. For client k
    (Eq. 10), ``outputs`` is its own h^k W_k and ``z`` its residual s^k.
    """
    return (duals * outputs).sum(dim=1).mean() + rho / 2 * ((outputs - z) ** 2).sum(dim=1).mean()


def residuals(contributions: list[torch.Tensor], z: torch.Tensor) -> list[torch.Tensor]:
    """Eq. 9: s^k = z − Σ_{i≠k} h^i W_i for every k, from each party's contribution h^i W_i."""
    total = torch.stack(contributions).sum(dim=0)
    return [z - (total - mine) for mine in contributions]


def joint_local_step(
    h: torch.Tensor,
    head: nn.Linear,
    head_optimizer: torch.optim.Optimizer,
    bottom_optimizer: torch.optim.Optimizer,
    duals: torch.Tensor,
    slack: torch.Tensor,
    rho: float,
) -> None:
    """One VIMADMM-J local step of a party: its head W_k and its bottom from one backward pass of Eq. 19-20.

    The paper's Appendix A.3 steps the head first, then the bottom under the new head; the
    authors' code (``fedclient/admmjoint.py``), which made the paper's tables, takes one backward
    pass and steps both. With the paper's order the parties overshoot and training diverges
    (docs/explanation/algorithms.md, "Where the papers and their code differ"). ``h`` is the party's embedding
    of the batch under its current bottom model, with its graph.
    """
    head_optimizer.zero_grad()
    bottom_optimizer.zero_grad()
    torch.autograd.backward(consensus_loss(head(h), duals, slack, rho))
    head_optimizer.step()
    bottom_optimizer.step()
