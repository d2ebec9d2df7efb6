"""What a finished job left on disk, compared between a fault-free run and one with failures.

``tests/integration/recovery/test_recovery.py`` and ``make bench-recovery`` both ask the same question:
did the job that lost a party (or its server) end with the model the uninterrupted run produced?
The answer comes from the files every party writes: the active party's ``summary.json`` (every
per-step training loss, in order) and each party's newest checkpoint (its final weights).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vflcore.data.checkpoints import LATEST, load_checkpoint, party_dir


@dataclass(frozen=True)
class JobOutcome:
    """Every per-step loss of a job, and each party's final tensors by their path in its checkpoint."""

    losses: list[float]
    weights: dict[int, dict[str, torch.Tensor]]


def job_outcome(run_dir: Path, job_id: str, parties: tuple[int, ...] = (1, 2, 3)) -> JobOutcome:
    """Read what the finished job ``job_id`` left under ``run_dir``."""
    summary = json.loads((party_dir(run_dir, job_id, 1) / "summary.json").read_text())
    weights = {p: tensors(load_checkpoint(party_dir(run_dir, job_id, p) / LATEST)["algorithm"]) for p in parties}
    return JobOutcome(losses=list(summary["step_losses"]), weights=weights)


def tensors(state: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a nested checkpoint state, by its path (``/top/0.weight``)."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        items: Any = state.items()
    elif isinstance(state, list | tuple):
        items = enumerate(state)
    else:
        return {}
    found: dict[str, torch.Tensor] = {}
    for key, value in items:
        found |= tensors(value, f"{prefix}/{key}")
    return found


def loss_difference(run: JobOutcome, reference: JobOutcome) -> float:
    """The largest absolute difference between the two runs' per-step losses; inf if their counts differ."""
    if len(run.losses) != len(reference.losses):
        return float("inf")
    return max((abs(a - b) for a, b in zip(run.losses, reference.losses, strict=True)), default=0.0)


def weight_differences(run: JobOutcome, reference: JobOutcome) -> dict[str, float]:
    """Per party and tensor path, the largest absolute difference of the final weights (inf: missing)."""
    found: dict[str, float] = {}
    for party, expected in reference.weights.items():
        mine = run.weights.get(party, {})
        for path, tensor in expected.items():
            name = f"party {party} {path}"
            if path not in mine or mine[path].shape != tensor.shape:
                found[name] = float("inf")
            elif tensor.numel() == 0:
                found[name] = 0.0
            else:
                found[name] = float((mine[path].double() - tensor.double()).abs().max())
    return found


def assert_same_model(faulty: JobOutcome, clean: JobOutcome, tolerance: float = 1e-6) -> None:
    """A resumed job ended with the uninterrupted run's per-step losses and weights, within ``tolerance``."""
    assert len(faulty.losses) == len(clean.losses), (len(faulty.losses), len(clean.losses))
    worst = loss_difference(faulty, clean)
    assert worst <= tolerance, f"per-step losses differ by up to {worst:.3g}"
    weights = weight_differences(faulty, clean)
    assert weights and max(weights.values()) <= tolerance, {k: v for k, v in weights.items() if v > tolerance}
