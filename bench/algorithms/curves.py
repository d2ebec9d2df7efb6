"""Learning curves of federated runs: when a run first reaches a target, and plots of them.

A curve is read off a server's ``summary.json``: per epoch, the held-out metrics after it and
the bytes its training exchanged (``wire_mb``, both directions, every party). One epoch is one
pass over the training rows; the benches call it a round where the seed papers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common.plots import pyplot


@dataclass(frozen=True)
class Curve:
    """One run: test accuracy and cumulative training MB after each epoch."""

    label: str
    accuracy: list[float]
    cumulative_mb: list[float]
    batches_per_epoch: int

    @classmethod
    def from_summary(cls, label: str, summary: dict[str, Any], batches_per_epoch: int) -> Curve:
        accuracy = [float(e["metrics"]["accuracy"]) for e in summary["epochs"]]
        total, cumulative = 0.0, []
        for epoch in summary["epochs"]:
            total += float(epoch["wire_mb"])
            cumulative.append(total)
        return cls(label, accuracy, cumulative, batches_per_epoch)

    def epochs_to(self, target: float) -> int | None:
        """The first epoch (1-based) after which accuracy >= target, or None if it never did."""
        return next((i + 1 for i, a in enumerate(self.accuracy) if a >= target), None)

    def mb_to(self, target: float) -> float | None:
        epochs = self.epochs_to(target)
        return None if epochs is None else self.cumulative_mb[epochs - 1]


def plot(curves: list[Curve], target: float, path: Path, *, title: str) -> Path:
    """Accuracy against epochs and against MB on the wire, one line per run, the target dashed."""
    plt = pyplot()
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, (by_round, by_mb) = plt.subplots(1, 2, figsize=(10, 3.8))
    for curve in curves:
        rounds = list(range(1, len(curve.accuracy) + 1))
        by_round.plot(rounds, curve.accuracy, marker="o", markersize=3, label=curve.label)
        by_mb.plot(curve.cumulative_mb, curve.accuracy, marker="o", markersize=3, label=curve.label)
    for axes, xlabel in ((by_round, "epoch (round)"), (by_mb, "MB on the wire, cumulative")):
        axes.axhline(target, linestyle="--", color="grey", linewidth=1)
        axes.set_xlabel(xlabel)
        axes.set_ylabel("test accuracy")
        axes.grid(alpha=0.3)
    by_mb.set_xscale("log")
    by_mb.xaxis.set_minor_formatter(NullFormatter())  # decade labels only
    by_mb.xaxis.set_major_formatter(ScalarFormatter())
    by_round.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
