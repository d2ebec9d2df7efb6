"""VIMADMM's z update is exact, and the residuals and dual update follow Eq. 7 and 9."""

from __future__ import annotations

import pytest
import torch

from vflalgorithms.vimadmm.maths import consensus_loss, dual_update, residuals, solve_z


def _objective(z: torch.Tensor, o: torch.Tensor, y: torch.Tensor, lam: torch.Tensor, rho: float) -> torch.Tensor:
    ce = torch.nn.functional.cross_entropy(z, y, reduction="none")
    return ce - (lam * z).sum(1) + rho / 2 * ((o - z) ** 2).sum(1)


@pytest.mark.parametrize("rho", [0.1, 1.0, 10.0])
def test_classification_z_is_the_minimiser(rho: float) -> None:
    """The gradient of Eq. 6 vanishes at z, and no random nearby point is better."""
    g = torch.Generator().manual_seed(0)
    o = 5 * torch.randn(64, 10, generator=g, dtype=torch.float64)
    lam = torch.randn(64, 10, generator=g, dtype=torch.float64)
    y = torch.randint(0, 10, (64,), generator=g)
    z = solve_z("classification", o, y, lam, rho).double().requires_grad_(True)
    _objective(z, o, y, lam, rho).sum().backward()
    assert z.grad is not None and float(z.grad.abs().max()) < 1e-5  # float32 rounding of z
    best = _objective(z.detach(), o, y, lam, rho)
    for _ in range(20):
        nearby = z.detach() + 1e-2 * torch.randn(z.shape, generator=g, dtype=torch.float64)
        assert bool((_objective(nearby, o, y, lam, rho) >= best - 1e-9).all())


def test_regression_z_is_the_closed_form() -> None:
    o, y, lam = torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.tensor([[0.5]])
    z = solve_z("regression", o, y, lam, rho=2.0)
    # d/dz [(z - 3)^2 - 0.5 z + (1 - z)^2] = 2(z - 3) - 0.5 - 2(1 - z) = 0  ->  z = 8.5 / 4
    assert float(z) == pytest.approx(8.5 / 4)


def test_dual_and_residuals_follow_eq7_and_eq9() -> None:
    parts = [torch.full((2, 3), 1.0), torch.full((2, 3), 2.0), torch.full((2, 3), 4.0)]
    z = torch.full((2, 3), 10.0)
    assert [float(s[0, 0]) for s in residuals(parts, z)] == [10 - 6, 10 - 5, 10 - 3]
    assert torch.equal(dual_update(torch.zeros(2, 3), sum(parts), z, rho=0.5), torch.full((2, 3), -1.5))


def test_consensus_loss_is_zero_at_consensus_without_duals() -> None:
    o = torch.randn(4, 3)
    assert float(consensus_loss(o, torch.zeros(4, 3), o, rho=1.0)) == 0.0
