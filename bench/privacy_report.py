"""The privacy bench's output: one line per run, a CSV of every figure, the trade-off plot, the verdict.

Everything here reads ``Outcome``s; nothing trains. The verdict follows the issue's target: on
the imbalanced task with SplitNN, among the defended settings whose test ROC AUC is within
``UTILITY_BOUND`` of the undefended run's, the smallest label-attack AUC (the larger of the norm
and the direction k = 1 attacks, last epoch) must be at most ``TARGET_AUC``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.privacy_runs import ATTACKS, NAN, OVER_EPOCHS, Outcome

TARGET_AUC = 0.60
UTILITY_BOUND = 0.01
TARGET_TASK, TARGET_ALGORITHM, UNDEFENDED = "imbalanced", "splitnn", "none"

_SHORT = {
    "norm_auc": "norm",
    "direction_auc_k1": "dir k1",
    "direction_auc_k10": "dir k10",
    "completion_1pct": "mc 1%",
    "completion_raw_1pct": "raw 1%",
    "completion_5pct": "mc 5%",
    "completion_raw_5pct": "raw 5%",
    "inversion_r2": "inv R2",
    "inversion_mse": "inv mse",
    "inversion_baseline_mse": "mean mse",
}


def _f(value: float, width: int = 7) -> str:
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:{width}.3f}"


def header() -> str:
    attacks = " ".join(f"{_SHORT[name]:>8}" for name in ATTACKS)
    return (
        f"{'task':<10} {'algorithm':<10} {'setting':<15} {'utility':>7} {'cost':>7} {attacks} "
        f"{'eps lbl':>7} {'eps emb':>7} {'job s':>6} {'probe s':>7}"
    )


def line(outcome: Outcome, baseline: float) -> str:
    """One run's row; ``cost`` is its utility minus the undefended run's (negative: the defence cost utility)."""
    run = outcome.run
    start = f"{run.task:<10} {run.algorithm:<10} {run.label:<15}"
    if not outcome.finished:
        return f"{start} {outcome.state}: {outcome.message}"
    attacks = " ".join(f"{_f(outcome.attack(name), 8)}" for name in ATTACKS)
    cost = outcome.utility - baseline
    row = (
        f"{start} {_f(outcome.utility)} {_f(cost)} {attacks} {_f(outcome.label_epsilon)} "
        f"{_f(outcome.embedding_epsilon)} {outcome.seconds:6.1f} {_f(outcome.probe_seconds)}"
    )
    return row + (f"  ({outcome.message})" if outcome.message else "")


def write_csv(outcomes: Sequence[Outcome], baselines: dict[tuple[str, str], float], path: Path) -> Path:
    """Every figure of every run, one row each, for a reader's own analysis."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        ends = ["label_epsilon", "embedding_epsilon", "job_seconds", "probe_seconds", "message"]
        writer.writerow(
            [
                "task",
                "algorithm",
                "setting",
                "repeat",
                "state",
                "utility",
                "utility_cost",
                *ATTACKS,
                *OVER_EPOCHS,
                *ends,
            ]
        )
        for o in outcomes:
            baseline = baselines.get((o.run.task, o.run.algorithm), NAN)
            writer.writerow(
                [o.run.task, o.run.algorithm, o.run.setting, o.run.repeat + 1, o.state, o.utility, o.utility - baseline]
                + [o.attack(name) for name in (*ATTACKS, *OVER_EPOCHS)]
                + [o.label_epsilon, o.embedding_epsilon, o.seconds, o.probe_seconds, o.message]
            )
    return path


def write_markdown(outcomes: Sequence[Outcome], baselines: dict[tuple[str, str], float], path: Path) -> Path:
    """The table as ``docs/privacy.md`` shows it: one row per finished run, model completion beside raw features."""

    def cell(value: float) -> str:
        return "-" if math.isnan(value) else f"{value:.3f}"

    def pair(attack: str, baseline: str, o: Outcome) -> str:
        return f"{cell(o.attack(attack))} ({cell(o.attack(baseline))})"

    rows = [
        "| task | algorithm | setting | utility | cost | norm AUC | direction AUC k=1 | k=10 | completion 1 % (raw) "
        "| completion 5 % (raw) | inversion R² | inversion MSE (mean's) | ε label | ε embedding |",
        "|" + " --- |" * 14,
    ]
    for o in outcomes:
        run = o.run
        if not o.finished:
            rows.append(f"| {run.task} | {run.algorithm} | {run.label} | {o.state}: {o.message} |" + " |" * 10)
            continue
        cost = o.utility - baselines.get((run.task, run.algorithm), NAN)
        rows.append(
            f"| {run.task} | {run.algorithm} | {run.label} | {cell(o.utility)} | {cell(cost)} "
            f"| {cell(o.attack('norm_auc'))} | {cell(o.attack('direction_auc_k1'))} "
            f"| {cell(o.attack('direction_auc_k10'))} | {pair('completion_1pct', 'completion_raw_1pct', o)} "
            f"| {pair('completion_5pct', 'completion_raw_5pct', o)} | {cell(o.attack('inversion_r2'))} "
            f"| {pair('inversion_mse', 'inversion_baseline_mse', o)} | {cell(o.label_epsilon)} "
            f"| {cell(o.embedding_epsilon)} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def plot(outcomes: Sequence[Outcome], path: Path, task: str = TARGET_TASK) -> Path | None:
    """Label-attack AUC against utility on ``task``: one point per run, one marker per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    shown = [o for o in outcomes if o.run.task == task and o.finished and not math.isnan(o.label_attack_auc)]
    if not shown:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8, 5.5))
    markers = "os^vD<>pP*"
    algorithms = list(dict.fromkeys(o.run.algorithm for o in shown))
    for index, algorithm in enumerate(algorithms):
        points = [o for o in shown if o.run.algorithm == algorithm]
        axes.scatter(
            [o.utility for o in points],
            [o.label_attack_auc for o in points],
            marker=markers[index % len(markers)],
            label=algorithm,
            s=40 if algorithm == TARGET_ALGORITHM else 25,
        )
        if algorithm == TARGET_ALGORITHM:
            for o in (o for o in points if o.run.repeat == 0):
                where = (o.utility, o.label_attack_auc)
                axes.annotate(o.run.setting, where, fontsize=7, xytext=(3, 3), textcoords="offset points")
    axes.axhline(TARGET_AUC, linestyle="--", color="grey", linewidth=1, label=f"target AUC <= {TARGET_AUC:.2f}")
    undefended = _find(shown, TARGET_ALGORITHM, UNDEFENDED)
    if undefended is not None:
        bound = undefended.utility - UTILITY_BOUND
        axes.axvline(bound, linestyle=":", color="grey", linewidth=1, label=f"{TARGET_ALGORITHM} utility bound")
    axes.set_ylim(min(0.4, *(o.label_attack_auc - 0.02 for o in shown)), 1.02)  # 0.5: a coin; 1: every label
    axes.set_xlabel("test ROC AUC (utility)")
    axes.set_ylabel("label attack AUC: max(norm, direction k=1), last epoch")
    axes.set_title(f"{task}: what each defence setting costs and protects", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def not_applicable(reasons: Mapping[tuple[str, str], str], multiclass: bool) -> list[str]:
    """Why a figure is a dash: the probes' own reasons, by algorithm and attack, and the multi-class norm attack."""
    lines = [f"  {algorithm:<12} {attack:<11} {why}" for (algorithm, attack), why in sorted(reasons.items())]
    if multiclass:
        lines.append(
            f"  {'any':<12} {'norm':<11} on a multi-class task: the attack ranks rows by one number, two classes"
        )
    return lines


def _find(outcomes: Sequence[Outcome], algorithm: str, setting: str) -> Outcome | None:
    return next((o for o in outcomes if o.run.algorithm == algorithm and o.run.setting == setting), None)


def mean_of_repeats(outcomes: Sequence[Outcome]) -> tuple[list[Outcome], list[str]]:
    """One outcome per setting, each figure the mean over its finished repeats; and a line per setting on the spread.

    The label attack AUC is the mean of each run's larger attack, so it lies within the spread it
    is printed with, and never below a mean of the two attacks taken separately.

    A defence's noise comes from a secret key drawn fresh for every job, so two runs of one setting
    differ; the target is judged on the mean, and the spread is printed beside it.
    """
    merged, lines = [], []
    for setting in dict.fromkeys(o.run.setting for o in outcomes):
        runs = [o for o in outcomes if o.run.setting == setting]
        done = [o for o in runs if o.finished]
        if not done:
            merged.append(runs[0])
            continue
        keys = set().union(*(o.attacks for o in done))
        mean = Outcome(
            replace(done[0].run, repeat=0),
            state="finished",
            utility=float(np.mean([o.utility for o in done])),
            attacks={k: float(np.mean([o.attack(k) for o in done])) for k in keys},
            mean_label_attack=float(np.mean([o.label_attack_auc for o in done])),
        )
        merged.append(mean)
        if len(runs) > 1:
            utility, attack = [o.utility for o in done], [o.label_attack_auc for o in done]
            lines.append(
                f"  {setting:<13} {len(done)} of {len(runs)} runs: test ROC AUC {mean.utility:.3f} "
                f"({min(utility):.3f}-{max(utility):.3f}), label attack AUC {mean.label_attack_auc:.3f} "
                f"({min(attack):.3f}-{max(attack):.3f})"
            )
    return merged, lines


def verdict(outcomes: Sequence[Outcome]) -> list[str]:
    """The target's reasoning, then the last line: ``BENCH privacy_attack_auc <v> auc target <= 0.60 MET|MISSED``.

    Each setting counts by its mean over repeats (``mean_of_repeats``).
    """
    mine, spread = mean_of_repeats(
        [o for o in outcomes if (o.run.task, o.run.algorithm) == (TARGET_TASK, TARGET_ALGORITHM)]
    )
    undefended = _find(mine, TARGET_ALGORITHM, UNDEFENDED)
    defended = [o for o in mine if o.run.setting != UNDEFENDED and o.finished and not math.isnan(o.label_attack_auc)]
    where = f"{TARGET_TASK} / {TARGET_ALGORITHM}"
    if undefended is None or not undefended.finished or not defended:
        return [
            f"target: no undefended and defended {where} runs to compare",
            f"BENCH privacy_attack_auc nan auc target <= {TARGET_AUC:.2f} MISSED",
        ]
    floor = undefended.utility - UTILITY_BOUND
    lines = []
    if spread:
        lines.append(f"{where}, mean (min-max) over the repeats of each setting:")
        lines.extend(spread)
    lines += [
        f"target ({where}): undefended test ROC AUC {undefended.utility:.3f}, label attack AUC "
        f"{undefended.label_attack_auc:.3f}; a setting counts if its test ROC AUC >= {floor:.3f}"
    ]
    useful = [o for o in defended if o.utility >= floor]
    frontier = sorted(defended, key=lambda o: o.label_attack_auc)
    if useful:
        best = min(useful, key=lambda o: o.label_attack_auc)
        met = best.label_attack_auc <= TARGET_AUC
        lines.append(
            f"best setting within the utility bound: {best.run.setting} (test ROC AUC {best.utility:.3f}, norm "
            f"{best.attack('norm_auc'):.3f}, direction k=1 {best.attack('direction_auc_k1'):.3f})"
        )
    else:
        best, met = frontier[0], False
        lines.append(
            f"no defended setting keeps test ROC AUC within {UTILITY_BOUND:.2f}; the frontier measured "
            "(label attack AUC, test ROC AUC):"
        )
        lines.extend(f"  {o.run.setting:<13} {o.label_attack_auc:.3f} {o.utility:.3f}" for o in frontier)
        lines.append(f"reported below: the lowest label attack AUC among all settings ({best.run.setting})")
    lines.append(
        f"BENCH privacy_attack_auc {best.label_attack_auc:.3f} auc target <= {TARGET_AUC:.2f} "
        f"{'MET' if met else 'MISSED'}"
    )
    return lines
