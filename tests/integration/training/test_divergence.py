"""A job whose training runs away fails with a message a user can act on, and keeps its finite checkpoints.

``vfl-server`` and two ``vfl-client`` daemons run as OS processes over mTLS (``vfltesting.service``)
on the digits data. A SplitNN job with plain SGD at learning rate 1e6 overflows within a few steps
on any CPU: the weights grow by orders of magnitude each step, so whichever party meets NaN or
infinity first, it is found before anything is sent or saved. The job fails with "training
diverged at epoch 1, batch N: ...", naming ``learning_rate`` and its value, never TensorRejected;
every party's newest checkpoint (one each step, ``checkpoint_every_steps = 1``) is finite and loads.
The daemons then run the next job as usual.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from vflalgorithms.divergence import nonfinite_state
from vflclient import JobClient
from vflcore.data.checkpoints import LATEST, checkpoint_positions, load_checkpoint, party_dir
from vflcore.job.schedule import Position
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, job_document

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RUNAWAY = {
    "optimizer": "sgd",
    "learning_rate": 1e6,
    "epochs": 2,
    "batch_size": 64,
    "embedding_dim": 8,
    "bottom_hidden": [16],
    "checkpoint_every_steps": 1,
}
DIVERGED = re.compile(r"^training diverged at epoch 1, batch (\d+): (.+)$")


@pytest.fixture(scope="module")
def daemons(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    with ServiceRun(tmp_path_factory.mktemp("divergence"), pki, digits_data, serving=False).started() as run:
        yield run


def test_a_runaway_job_fails_naming_the_step_and_the_setting(daemons: ServiceRun, pki: Pki) -> None:
    """The job fails as diverged at a step of epoch 1, naming `learning_rate` (now 1e+06); the checkpoints
    before it are finite and load, and the next job on the same daemons finishes."""
    with JobClient(daemons.address, tls=pki.operator_files("alice")) as jobs:
        job = jobs.submit(job_document("runaway", "splitnn", **RUNAWAY))
        lines = [str(event) for event in jobs.watch(job.id)]
        failed = jobs.get(job.id)
        assert failed.state == "failed", "\n".join(lines) + daemons.tail()
        assert lines[-1] == f"runaway state failed: {failed.error}"  # what `vfl-jobs watch` prints
        found = DIVERGED.match(failed.error)
        assert found is not None, failed.error
        assert "TensorRejected" not in failed.error and "unavailable" not in failed.error, failed.error
        assert "NaN" in failed.error or "infinite" in failed.error or "not finite" in failed.error
        assert "`learning_rate` (now 1e+06)" in failed.error and "`optimizer` (now sgd)" in failed.error
        batch = int(found.group(1))
        assert batch >= 2, failed.error  # the first step starts from the seeded weights: finite
        for party in (1, 2, 3):
            folder = party_dir(daemons.root / "runs", job.id, party)
            saved = checkpoint_positions(folder)
            assert saved, f"party {party} kept no checkpoint"
            assert saved[-1] < Position(0, batch), (party, saved, failed.error)
            state = load_checkpoint(folder / LATEST)
            assert Position(*state["position"]) == saved[-1]
            assert nonfinite_state(state) is None, (party, nonfinite_state(state))
            weights = [t for t in _tensors(state) if t.is_floating_point()]
            assert weights and all(bool(torch.isfinite(t).all()) for t in weights)

        after = jobs.submit(job_document("after-runaway", "splitnn", epochs=1, embedding_dim=8, bottom_hidden=[16]))
        for _ in jobs.watch(after.id):
            pass
        assert jobs.get(after.id).state == "finished", daemons.tail()


def _tensors(state: object) -> Iterator[torch.Tensor]:
    if isinstance(state, dict):
        for value in state.values():
            yield from _tensors(value)
    elif isinstance(state, list | tuple):
        for value in state:
            yield from _tensors(value)
    elif isinstance(state, torch.Tensor):
        yield state
