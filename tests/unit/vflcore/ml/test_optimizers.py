"""Each role's models get the optimizer the job names for it (issue 47: the VIM authors' settings).

The authors train the server's model and its heads with plain SGD and the parties' bottom models
with SGD and momentum 0.9. Before ``[job] top_optimizer`` a job could only say "sgd", which put
momentum 0.9 on every optimizer, heads included, and that alone made VIMADMM-J diverge at the
paper's settings.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflalgorithms.vimadmm_j.reference import ReferenceVIMADMMJ
from vflcore.job.spec import JobSpec
from vflcore.ml.optimizers import StepTogether, make_optimizer, role_optimizer, roles_optimizer

AUTHORS = {"optimizer": "sgd", "top_optimizer": "plain_sgd", "learning_rate": 0.1, "weight_decay": 1e-3}


def _job(algorithm: str = "splitnn", **settings: object) -> JobSpec:
    return JobSpec(job_id="roles", algorithm=algorithm, num_rows=40, embedding_dim=4, bottom_hidden=(6,), **settings)  # type: ignore[arg-type]


def _data() -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    features = {
        1: torch.randn(40, 3, generator=g),
        2: torch.randn(40, 5, generator=g),
        3: torch.randn(40, 2, generator=g),
    }
    return features, torch.randint(0, 3, (40,), generator=g).to(torch.float64)


def _momenta(optimizer: torch.optim.Optimizer | StepTogether) -> list[float]:
    return [group["momentum"] for group in optimizer.param_groups]


def test_plain_sgd_has_no_momentum_and_sgd_keeps_its_momentum() -> None:
    assert _momenta(make_optimizer("plain_sgd", nn.Linear(2, 2).parameters(), lr=0.1)) == [0.0]
    assert _momenta(make_optimizer("sgd", nn.Linear(2, 2).parameters(), lr=0.1)) == [0.9]


def test_vimadmm_j_heads_take_the_top_role_on_every_party() -> None:
    """VIMADMM-J's heads live on the parties; they are the top role, so plain SGD, while the bottoms keep momentum."""
    features, labels = _data()
    ref = ReferenceVIMADMMJ(_job("vimadmm_j", **AUTHORS), features, labels)
    for party in (1, 2, 3):
        assert _momenta(ref.head_optimizers[party]) == [0.0]
        assert _momenta(ref.bottom_optimizers[party]) == [0.9]


def test_splitnn_top_and_bottoms_each_have_their_role() -> None:
    """The top model plain SGD; every bottom model, the active party's own too, SGD with momentum at its rate."""
    features, labels = _data()
    ref = ReferenceSplitNN(_job(**AUTHORS, bottom_learning_rate=0.05), features, labels)
    assert [(g["momentum"], g["lr"]) for g in ref.optimizer.param_groups] == [(0.0, 0.1)]
    for party in (1, 2, 3):
        assert [(g["momentum"], g["lr"]) for g in ref.bottom_optimizers[party].param_groups] == [(0.9, 0.05)]


def test_roles_of_different_kinds_step_together_and_checkpoint() -> None:
    """Adam for the top, SGD for the bottom: two optimizers that step, save and load as one."""
    top, bottom = nn.Linear(3, 2), nn.Linear(2, 3)
    job = _job(top_optimizer="adam", bottom_optimizer="sgd", learning_rate=0.1)
    both = roles_optimizer(job, {"top": top.parameters(), "bottom": bottom.parameters()})
    assert isinstance(both, StepTogether)
    both.zero_grad()
    top(bottom(torch.ones(4, 2))).sum().backward()
    before = bottom.weight.detach().clone()
    both.step()
    assert not torch.equal(before, bottom.weight.detach())
    again = roles_optimizer(job, {"top": top.parameters(), "bottom": bottom.parameters()})
    assert isinstance(again, StepTogether)
    again.load_state_dict(both.state_dict())
    assert again.state_dict()["optimizers"][1]["state"][0]["momentum_buffer"].shape == (3, 2)


def test_a_role_without_its_own_keys_follows_the_job() -> None:
    job = _job(optimizer="adam", learning_rate=0.01, weight_decay=0.5)
    group = role_optimizer(job, "top", nn.Linear(2, 2).parameters()).param_groups[0]
    assert isinstance(role_optimizer(job, "bottom", nn.Linear(2, 2).parameters()), torch.optim.Adam)
    assert (group["lr"], group["weight_decay"]) == (0.01, 0.5)
    with pytest.raises(ValueError, match="unknown model role 'head'"):
        job.optimizer_for("head")
