"""The algorithms step in the order of their authors' code, which made the papers' tables (issue 47).

Each test replays one round by hand in the authors' order (``AI-secure/VFL-ADMM``) and compares
it with the in-process reference, which the equivalence tests tie to the federated run. Each
failed on the order the project had before: VIMSGD's bottoms under the updated heads, VIMADMM's
residual from the updated heads, VIMADMM-J's bottom stepped under its updated head, FedBCD's top
model stepped Q times a round.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from vflalgorithms.fedbcd.reference import ReferenceFedBCD
from vflalgorithms.vimadmm import maths as admm
from vflalgorithms.vimadmm.reference import ReferenceVIMADMM
from vflalgorithms.vimsgd.reference import ReferenceVIMSGD
from vflcore.job.spec import JobSpec

ROWS = 96
LR = 0.1


def _job(algorithm: str, **options: object) -> JobSpec:
    return JobSpec(
        job_id=f"{algorithm}-order",
        algorithm=algorithm,
        batch_size=32,
        embedding_dim=6,
        bottom_hidden=(8,),
        optimizer="plain_sgd",
        learning_rate=LR,
        num_rows=ROWS,
        passive_parties=(2, 3),
        algorithm_options=dict(options),
    )


def _data() -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """A labels-and-features active party and two passive parties, 4 classes."""
    g = torch.Generator().manual_seed(7)
    features = {
        1: torch.randn(ROWS, 3, generator=g),
        2: torch.randn(ROWS, 5, generator=g),
        3: torch.randn(ROWS, 4, generator=g),
    }
    labels = torch.randint(0, 4, (ROWS,), generator=g).to(torch.float64)
    return features, labels


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _assert_params(model: nn.Module, expected: list[torch.Tensor]) -> None:
    for got, want in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want, rtol=0, atol=1e-6)


def test_vimsgd_steps_heads_and_bottoms_from_one_backward_pass() -> None:
    """The authors' ``vimsgd_concat``: one loss, one backward pass, then every model steps (plain SGD)."""
    features, labels = _data()
    ref = ReferenceVIMSGD(_job("vimsgd"), features, labels)
    heads, bottoms = copy.deepcopy(ref.top), copy.deepcopy(ref.bottoms)
    rows = ref.schedule.batches(0)[0]
    parties = sorted(bottoms)
    loss = ref.loss_fn(heads([bottoms[p](features[p][rows]) for p in parties]), ref.labels[rows])
    loss.backward()
    expected = {p: [w - LR * w.grad for w in bottoms[p].parameters()] for p in parties}
    expected_heads = [w - LR * w.grad for w in heads.parameters()]

    ref._train_round(rows)

    _assert_params(ref.top, [w.detach() for w in expected_heads])
    for p in parties:
        _assert_params(ref.bottoms[p], [w.detach() for w in expected[p]])


def test_vimadmm_residual_comes_from_the_outputs_before_the_heads_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The authors' ``fedserver/vimadmm.py`` sends ``batch_s_Q - Q[uid]``: Q is filled before any head steps."""
    features, labels = _data()
    ref = ReferenceVIMADMM(_job("vimadmm", local_steps=2), features, labels)
    heads, bottoms = copy.deepcopy(ref.top), copy.deepcopy(ref.bottoms)
    rows = ref.schedule.batches(0)[0]
    seen: list[list[torch.Tensor]] = []
    real = admm.residuals

    def recording(contributions: list[torch.Tensor], z: torch.Tensor) -> list[torch.Tensor]:
        seen.append([c.clone() for c in contributions])
        return real(contributions, z)

    monkeypatch.setattr(admm, "residuals", recording)
    ref._train_round(rows)

    with torch.no_grad():
        before = [head(bottoms[p](features[p][rows])) for head, p in zip(heads.linears(), sorted(bottoms), strict=True)]
    assert len(seen) == 1
    for got, want in zip(seen[0], before, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_vimadmm_j_local_step_takes_head_and_bottom_from_one_backward_pass() -> None:
    """The authors' ``fedclient/admmjoint.py``: one backward pass, then the head and the bottom step."""
    g = torch.Generator().manual_seed(3)
    bottom, head = nn.Linear(5, 6), nn.Linear(6, 4, bias=False)
    x = torch.randn(16, 5, generator=g)
    duals, slack = torch.randn(16, 4, generator=g), torch.randn(16, 4, generator=g)
    twin_bottom, twin_head = copy.deepcopy(bottom), copy.deepcopy(head)
    admm.consensus_loss(twin_head(twin_bottom(x)), duals, slack, 1.0).backward()
    expected_head = [w - LR * w.grad for w in twin_head.parameters()]
    expected_bottom = [w - LR * w.grad for w in twin_bottom.parameters()]

    admm.joint_local_step(
        bottom(x),
        head,
        torch.optim.SGD(head.parameters(), lr=LR),
        torch.optim.SGD(bottom.parameters(), lr=LR),
        duals,
        slack,
        1.0,
    )

    _assert_params(head, [w.detach() for w in expected_head])
    _assert_params(bottom, [w.detach() for w in expected_bottom])


def test_fedbcd_steps_the_top_model_once_and_every_bottom_q_times() -> None:
    """The authors' ``fedserver/fedbcd.py`` (and thesis 002 §5.4.1): only the workers loop, on the round's gradient."""
    q = 3
    features, labels = _data()
    ref = ReferenceFedBCD(_job("fedbcd", local_steps=q), features, labels)
    top, bottoms = copy.deepcopy(ref.top), copy.deepcopy(ref.bottoms)
    rows = ref.schedule.batches(0)[0]
    parties = sorted(bottoms)
    sent = [bottoms[p](features[p][rows]) for p in parties]
    cut = [h.detach().requires_grad_(True) for h in sent]
    ref.loss_fn(top(torch.cat(cut, dim=1)), ref.labels[rows]).backward()
    expected_top = [(w - LR * w.grad).detach() for w in top.parameters()]
    for party, leaf in zip(parties, cut, strict=True):
        optimizer = torch.optim.SGD(bottoms[party].parameters(), lr=LR)
        for _ in range(q):
            optimizer.zero_grad()
            bottoms[party](features[party][rows]).backward(leaf.grad)
            optimizer.step()

    ref._train_round(rows)

    _assert_params(ref.top, expected_top)
    for party in parties:
        _assert_params(ref.bottoms[party], _params(bottoms[party]))
