"""The daemons' warm-up: a job's first training step finds torch ready, and the start-up heap is frozen."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from vfltesting.paths import REPO_ROOT as ROOT

#: In a fresh interpreter (this one may have loaded everything already): warm up, then do what a
#: job's first step does with the project's own pieces, and report what that step still loaded.
_PROBE = """
import gc, json, sys
import torch
torch.manual_seed(7)
expected = torch.rand(4).tolist()
torch.manual_seed(7)
from vflcore.runtime.warmup import warm_up
warm_up("cpu")
after_warm_up = torch.rand(4).tolist()
frozen = gc.get_freeze_count()
from vflcore.job.spec import OPTIMIZERS, JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.models import job_optimizer, mlp
before = set(sys.modules)
for optimizer in OPTIMIZERS:
    for task, outputs, labels in (("classification", 3, torch.tensor([0, 2])), ("regression", 1, torch.zeros(2, 1))):
        model = mlp(5, [8], outputs)
        step = job_optimizer(JobSpec("probe", optimizer=optimizer, learning_rate=0.01), model.parameters())
        task_loss(task)(model(torch.ones(2, 5)), labels).backward()
        step.step()
print(json.dumps({"loaded": sorted(set(sys.modules) - before), "frozen": frozen,
                  "rng_kept": after_warm_up == expected}))
"""


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class TestWarmUp:
    def test_first_training_step_loads_no_module(self, probe: dict[str, Any]) -> None:
        """After warm_up, a first step with each optimizer and task imports nothing (torch._dynamo came at start)."""
        assert probe["loaded"] == []

    def test_start_up_heap_is_frozen(self, probe: dict[str, Any]) -> None:
        """Everything alive after warm_up is out of the collector's way, the exit's final collection included."""
        assert probe["frozen"] > 10_000

    def test_torch_random_state_is_left_alone(self, probe: dict[str, Any]) -> None:
        """A job seeded after start draws what it would have drawn without the warm-up."""
        assert probe["rng_kept"]
