"""The AdptVFedConv experiment's outputs: its Table 2 in markdown, the paper's ordering, the bar chart.

Accuracies arrive here as percentages, per method, one value per seed; everything is a mean ±
sample standard deviation over seeds. Kept apart from the runs so that the numbers can be
re-rendered without retraining anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bench.common.plots import pyplot
from bench.common.stats import mean_of, mean_std

#: method -> accuracy per seed, in %.
Table = Mapping[str, Sequence[float]]

#: 003 Table 2's orderings, each read on the means as "left > right": centralised > AdptVFedConv >
#: zero padding and no model transfer > non-cooperation.
ORDERING = (
    ("Centralised", "AdptVFedConv"),
    ("AdptVFedConv", "Zero padding"),
    ("AdptVFedConv", "No model transfer"),
    ("Zero padding", "Non-cooperation"),
    ("No model transfer", "Non-cooperation"),
)
#: The paper's CIFAR-10 column, for the reader to set beside ours.
PAPER_CIFAR10 = {
    "AdptVFedConv": 91.30,
    "Centralised": 94.04,
    "Non-cooperation": 65.85,
    "No model transfer": 87.73,
    "Zero padding": 90.79,
}


def gap_to_centralised(table: Table) -> float:
    """Centralised mean − AdptVFedConv mean, in points: the BENCH value."""
    return mean_of(table["Centralised"]) - mean_of(table["AdptVFedConv"])


def markdown_table(table: Table) -> str:
    """Table 2's layout: one row per method, mean ± std, the per-seed values, the paper's CIFAR-10 number."""
    lines = [
        "| Method | digits (mean ± std) | per seed | 003 CIFAR-10 |",
        "|---|---:|---|---:|",
    ]
    for method, values in table.items():
        mean, std = mean_std(values)
        seeds = ", ".join(f"{v:.2f}" for v in values)
        paper = PAPER_CIFAR10.get(method)
        lines.append(f"| {method} | {mean:.2f} ± {std:.2f} | {seeds} | {'' if paper is None else f'{paper:.2f}'} |")
    return "\n".join(lines)


def ordering_lines(table: Table) -> tuple[list[str], bool]:
    """Each of the paper's comparisons on the means, and whether all of them hold."""
    lines, holds = [], True
    for left, right in ORDERING:
        difference = mean_of(table[left]) - mean_of(table[right])
        holds = holds and difference > 0
        lines.append(f"{left} − {right} = {difference:+.2f} pts: {'holds' if difference > 0 else 'DOES NOT hold'}")
    return lines, holds


def plot_table(table: Table, path: Path, *, title: str) -> Path:
    """One bar per method (mean, with the std as an error bar), its mean written on it."""
    plt = pyplot()

    path.parent.mkdir(parents=True, exist_ok=True)
    methods = list(table)
    stats = [mean_std(table[m]) for m in methods]
    figure, axes = plt.subplots(figsize=(7, 3.8))
    x = np.arange(len(methods))
    bars = axes.bar(x, [m for m, _ in stats], 0.6, yerr=[s for _, s in stats], capsize=4, color="tab:blue")
    bars[methods.index("AdptVFedConv")].set_color("tab:orange")
    for xi, (mean, _) in enumerate(stats):
        axes.text(xi, 2, f"{mean:.1f}", ha="center", va="bottom", color="white", fontsize=9)
    axes.set_xticks(x, methods, fontsize=8)
    axes.set_ylabel("test accuracy, %")
    axes.set_ylim(0, 100)
    axes.grid(axis="y", alpha=0.3)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
