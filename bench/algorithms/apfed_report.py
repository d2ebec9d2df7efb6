"""The APFed experiment's outputs: its Table 2 in markdown, the paper's pattern per setting, and the two plots.

Accuracies arrive here as percentages, per setting and method (or per method and λ), one value
per seed; everything is a mean ± sample standard deviation over seeds. Kept apart from the runs
so that the numbers can be re-rendered without retraining anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bench.common.plots import pyplot
from bench.common.stats import mean_of, mean_std

#: The paper's Table 2 columns, in its order.
METHODS = ("TVFL-0", "TVFL-A", "TVFL-R", "SingleVL", "APFed-R", "APFed-C")
#: Not a method of the APFed setting (it needs every party at inference); shown to bound the TVFL rows.
REFERENCE = "TVFL (all)"
APFED = ("APFed-R", "APFed-C")
TVFL = ("TVFL-0", "TVFL-A", "TVFL-R")
#: "SingleVL ≫ TVFL" is read as: SingleVL's mean beats the best TVFL mean by at least this many points.
FAR_AHEAD_PTS = 10.0

#: setting -> method -> accuracy per seed, in %.
Table = Mapping[str, Mapping[str, Sequence[float]]]
#: method -> λ -> accuracy per seed, in %.
Sweep = Mapping[str, Mapping[float, Sequence[float]]]


def apfed_gain(table: Table) -> float:
    """Mean over settings of (the better APFed mean − the SingleVL mean), in points: the BENCH value."""
    gains = [max(mean_of(row[m]) for m in APFED) - mean_of(row["SingleVL"]) for row in table.values()]
    return float(np.mean(gains))


def markdown_table(table: Table) -> str:
    """Table 2's layout: one row per setting, mean ± std per method, then an average row of the means."""
    columns = [*METHODS, REFERENCE]
    lines = [
        "| Setting | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for setting, row in table.items():
        cells = [f"{mean:.2f} ± {std:.2f}" for mean, std in (mean_std(row[m]) for m in columns)]
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    averages = [f"{np.mean([mean_of(row[m]) for row in table.values()]):.2f}" for m in columns]
    lines.append("| Avg. | " + " | ".join(averages) + " |")
    return "\n".join(lines)


def pattern_lines(table: Table) -> list[str]:
    """Per setting: does the paper's APFed ≥ SingleVL ≫ TVFL hold (on the means)?"""
    lines = []
    for setting, row in table.items():
        best_apfed = max(APFED, key=lambda m: mean_of(row[m]))
        best_tvfl = max(TVFL, key=lambda m: mean_of(row[m]))
        single = mean_of(row["SingleVL"])
        ahead = mean_of(row[best_apfed]) - single
        margin = single - mean_of(row[best_tvfl])
        holds = ahead >= 0 and margin >= FAR_AHEAD_PTS
        lines.append(
            f"{setting}: {best_apfed} − SingleVL = {ahead:+.2f} pts ({'≥ 0' if ahead >= 0 else '< 0'}); "
            f"SingleVL − {best_tvfl} = {margin:+.2f} pts ({'≥' if margin >= FAR_AHEAD_PTS else '<'} "
            f"{FAR_AHEAD_PTS:.0f}): APFed ≥ SingleVL ≫ TVFL {'HOLDS' if holds else 'does not hold'}"
        )
    return lines


def sweep_table(sweep: Sweep) -> str:
    """The λ sweep as markdown: one row per method, one column per λ."""
    lambdas = sorted({weight for by_weight in sweep.values() for weight in by_weight})
    lines = [
        "| Method | " + " | ".join(f"λ = {w:g}" for w in lambdas) + " |",
        "|---|" + "---:|" * len(lambdas),
    ]
    for method, by_weight in sweep.items():
        cells = [f"{mean:.2f} ± {std:.2f}" for mean, std in (mean_std(by_weight[w]) for w in lambdas)]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_table(table: Table, path: Path, *, title: str) -> Path:
    """Grouped bars: per setting, one bar per method (mean, with the std as an error bar)."""
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = list(table)
    figure, axes = plt.subplots(figsize=(10, 3.8))
    width = 0.8 / len(METHODS)
    for k, method in enumerate(METHODS):
        stats = [mean_std(table[s][method]) for s in settings]
        x = np.arange(len(settings)) + (k - (len(METHODS) - 1) / 2) * width
        axes.bar(x, [m for m, _ in stats], width, yerr=[s for _, s in stats], capsize=2, label=method)
    axes.set_xticks(np.arange(len(settings)), settings)
    axes.set_xlabel("setting (m views, view i on the active party)")
    axes.set_ylabel("test accuracy, %")
    axes.set_ylim(0, 100)
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=8, ncol=len(METHODS), loc="upper center", bbox_to_anchor=(0.5, -0.18))
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_sweep(sweep: Sweep, path: Path, *, title: str) -> Path:
    """Accuracy against λ per method (λ on evenly spaced ticks, as in the paper's Fig. 3-4); λ = 0 is SingleVL."""
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(6, 3.8))
    for method, by_weight in sweep.items():
        lambdas = sorted(by_weight)
        stats = [mean_std(by_weight[w]) for w in lambdas]
        axes.errorbar(
            range(len(lambdas)), [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3, label=method
        )
        axes.set_xticks(range(len(lambdas)), [f"{w:g}" for w in lambdas])
    axes.set_xlabel("λ (weight of every passive party's loss; 0 = SingleVL)")
    axes.set_ylabel("test accuracy, %")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
