"""A party's training state survives a checkpoint: capture, save, load, restore gives the same numbers."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from vflcore.data.checkpoints import load_checkpoint, save_checkpoint
from vflcore.ml.state import capture, restore, restore_rng, rng_state


class _Half:
    """Something shaped like an algorithm's half: models, optimizers, generators and plain state."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = nn.Linear(3, 2)
        self.head = nn.Linear(2, 1)
        self.optimizers = (
            torch.optim.Adam(self.model.parameters(), lr=0.1),
            torch.optim.SGD(self.head.parameters(), lr=0.1, momentum=0.9),
        )
        self.duals = torch.zeros(4, 2)
        self.cache = {2: torch.zeros(3), 3: torch.ones(3)}
        self.phase = "pretraining"
        self.maps: torch.Tensor | None = None
        self.arrivals: list[tuple[int, int, int]] = []
        self.rows = np.arange(5, dtype=np.int64)
        self.delay = type("Delay", (), {})()
        self.delay.rng = np.random.default_rng(seed)

    names = ("model", "head", "optimizers", "duals", "cache", "phase", "maps", "arrivals", "rows", "delay.rng")

    def train(self) -> None:
        """One step that touches every piece of state."""
        for optimizer in self.optimizers:
            optimizer.zero_grad()
        self.head(self.model(torch.ones(1, 3))).sum().backward()
        for optimizer in self.optimizers:
            optimizer.step()
        self.duals += 1.5
        self.cache[3] *= 2
        self.phase, self.maps = "classifier", torch.full((2, 2), 7.0)
        self.arrivals.append((2, 0, 1))
        self.rows = self.rows[::-1].copy()
        self.delay.rng.random()


def _through_a_file(state: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    save_checkpoint(tmp_path, 0, {"algorithm": state})
    loaded: dict[str, Any] = load_checkpoint(tmp_path / "epoch-0000.pt")["algorithm"]
    return loaded


class TestCaptureRestore:
    def test_restored_half_continues_exactly_like_the_original(self, tmp_path: Path) -> None:
        """A half restored from a file, then trained one more step, equals the original trained one more step."""
        original = _Half(seed=1)
        original.train()
        saved = _through_a_file(capture(original, _Half.names), tmp_path)
        copy = _Half(seed=2)  # other weights, other generator: everything must come from the file
        restore(copy, saved, _Half.names)
        original.train()
        copy.train()
        for name in _Half.names:
            assert _plain(capture(copy, [name])) == _plain(capture(original, [name])), name
        assert copy.optimizers[0].param_groups[0]["params"][0] is copy.model.weight  # still the live model's

    def test_missing_name_is_an_error_naming_it(self) -> None:
        """A checkpoint written by another algorithm lacks a name: KeyError naming it."""
        with pytest.raises(KeyError, match="duals"):
            restore(_Half(seed=1), {}, ["duals"])

    def test_an_object_it_cannot_store_is_refused(self) -> None:
        """State must be tensors, arrays, generators or numbers: anything else is a TypeError naming its type."""
        holder = type("Holder", (), {"thing": object()})()
        with pytest.raises(TypeError, match="object"):
            capture(holder, ["thing"])


class TestProcessGenerators:
    def test_torch_numpy_and_python_generators_come_back(self, tmp_path: Path) -> None:
        """After restore_rng, the next draws of all three generators repeat those after rng_state."""
        saved = rng_state()
        save_checkpoint(tmp_path, 0, {"rng": saved})
        first = (torch.rand(3), np.random.random(3), random.random())
        restore_rng(load_checkpoint(tmp_path / "epoch-0000.pt")["rng"])
        again = (torch.rand(3), np.random.random(3), random.random())
        assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1]) and first[2] == again[2]


def _plain(value: Any) -> Any:
    """Tensors and arrays as nested lists, so two captures compare with ==."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
