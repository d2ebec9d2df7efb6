"""The privacy bench's output: a line per run, a CSV of every run, the cells' table, the frontier plot, the verdict.

Everything here reads ``Outcome``s and the cells made of them (``bench.privacy.cells``); nothing
trains. The verdict follows issue 38's target, per algorithm, on the imbalanced task: among the
algorithm's settings whose mean paired utility cost is within ``UTILITY_BOUND`` (the undefended
setting is one of them: cost 0), the best is the one with the lowest cell label attack (the
largest mean among ``bench.privacy.cells.LABEL_ATTACKS``: the strongest attacker over the whole run,
issue 48's maximum over every attack, and the norm and direction k = 1 attacks, for VIMADMM and
VIMADMM-J on s^k_B too). The value is the worst algorithm's best; it meets the target at ``TARGET_AUC`` or below.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.common.plots import pyplot
from bench.privacy.cells import UNDEFENDED, Cell
from bench.privacy.runs import ATTACKS, NAN, OVER_EPOCHS, Outcome

TARGET_AUC = 0.60
UTILITY_BOUND = 0.01
TARGET_TASK = "imbalanced"

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
    "strongest_auc_run": "strongest",
}


def _f(value: float, width: int = 7) -> str:
    return f"{'-':>{width}}" if math.isnan(value) else f"{value:{width}.3f}"


def header() -> str:
    attacks = " ".join(f"{_SHORT[name]:>8}" for name in ATTACKS)
    return (
        f"{'task':<10} {'algorithm':<10} {'setting':<13} {'seed':>4} {'utility':>7} {'cost':>7} {attacks} "
        f"{'eps lbl':>7} {'eps emb':>7} {'job s':>6} {'probe s':>7}"
    )


def line(outcome: Outcome, baseline: float) -> str:
    """One run's row; ``cost`` is its utility minus the undefended run's of the same seed (negative: a loss)."""
    run = outcome.run
    start = f"{run.task:<10} {run.algorithm:<10} {run.setting:<13} {run.seed:>4}"
    if not outcome.finished:
        return f"{start} {outcome.state}: {outcome.message}"
    attacks = " ".join(f"{_f(outcome.attack(name), 8)}" for name in ATTACKS)
    row = (
        f"{start} {_f(outcome.utility)} {_f(outcome.utility - baseline)} {attacks} {_f(outcome.label_epsilon)} "
        f"{_f(outcome.embedding_epsilon)} {outcome.seconds:6.1f} {_f(outcome.probe_seconds)}"
    )
    return row + (f"  ({outcome.message})" if outcome.message else "")


def write_csv(outcomes: Sequence[Outcome], path: Path) -> Path:
    """Every figure of every run, one row each (the cells' means are computed from these)."""
    undefended = {(o.run.task, o.run.algorithm, o.run.seed): o.utility for o in outcomes if o.run.setting == UNDEFENDED}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        ends = ["label_epsilon", "embedding_epsilon", "job_seconds", "probe_seconds", "message"]
        writer.writerow(
            ["task", "algorithm", "setting", "seed", "state", "utility", "utility_cost", *ATTACKS, *OVER_EPOCHS, *ends]
        )
        for o in outcomes:
            cost = o.utility - undefended.get((o.run.task, o.run.algorithm, o.run.seed), NAN)
            writer.writerow(
                [o.run.task, o.run.algorithm, o.run.setting, o.run.seed, o.state, o.utility, cost]
                + [o.attack(name) for name in (*ATTACKS, *OVER_EPOCHS)]
                + [o.label_epsilon, o.embedding_epsilon, o.seconds, o.probe_seconds, o.message]
            )
    return path


def cell_table(cells: Sequence[Cell]) -> list[str]:
    """The cells as ``docs/privacy.md`` shows them: mean [95 % interval] over the seeds."""
    rows = [
        "| task | algorithm | setting | seeds | utility | cost (paired) | strongest attack | norm AUC "
        "| direction AUC k=1 | k=10 | s^k_B norm / direction k=1 | completion 5 % (raw) | inversion R² "
        "| ε label | ε embedding |",
        "|" + " --- |" * 15,
    ]
    for c in cells:
        start = f"| {c.task} | {c.algorithm} | {c.setting} |"
        if not c.finished:
            rows.append(f"{start} 0 | {c.why_not} |" + " |" * 10)
            continue
        a = c.attacks
        residual = "-"
        if not math.isnan(a["residual_norm_auc"].mean):
            residual = f"{a['residual_norm_auc'].text()} / {a['residual_direction_auc_k1'].text()}"
        rows.append(
            f"{start} {c.seeds} | {c.utility.text()} | {c.cost.text()} | {a['strongest_auc_run'].text()} "
            f"| {a['norm_auc'].text()} "
            f"| {a['direction_auc_k1'].text()} | {a['direction_auc_k10'].text()} | {residual} "
            f"| {a['completion_5pct'].text()} ({a['completion_raw_5pct'].text()}) | {a['inversion_r2'].text()} "
            f"| {c.label_epsilon.text()} | {c.embedding_epsilon.text()} |"
        )
    return rows


def write_markdown(cells: Sequence[Cell], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(cell_table(cells)) + "\n", encoding="utf-8")
    return path


def plot(cells: Sequence[Cell], path: Path, task: str = TARGET_TASK) -> Path | None:
    """Each algorithm's frontier on ``task``: cell label attack against mean utility cost, 95 % intervals as bars."""
    plt = pyplot()

    shown = [c for c in cells if c.task == task and c.finished and not math.isnan(c.label_attack)]
    if not shown:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(9, 6))
    markers = "os^vD<>pP*"
    for index, algorithm in enumerate(dict.fromkeys(c.algorithm for c in shown)):
        points = sorted((c for c in shown if c.algorithm == algorithm), key=lambda c: -c.cost.mean)
        costs = [c.cost.mean for c in points]
        attack = [c.label_attack for c in points]
        spread = [
            [max(c.cost.mean - c.cost.low, 0) for c in points],
            [max(c.cost.high - c.cost.mean, 0) for c in points],
        ]
        axes.errorbar(
            costs,
            attack,
            xerr=[[0 if math.isnan(v) else v for v in side] for side in spread],
            marker=markers[index % len(markers)],
            capsize=2,
            linestyle="none",
            label=algorithm,
        )
        for c in points:
            axes.annotate(
                c.setting, (c.cost.mean, c.label_attack), fontsize=6, xytext=(3, 3), textcoords="offset points"
            )
    axes.axhline(TARGET_AUC, linestyle="--", color="grey", linewidth=1, label=f"target attack AUC <= {TARGET_AUC:.2f}")
    axes.axvline(-UTILITY_BOUND, linestyle=":", color="grey", linewidth=1, label=f"cost bound -{UTILITY_BOUND}")
    axes.set_xlabel("test ROC AUC cost, paired by seed (mean; bars: 95 % interval)")
    axes.set_ylabel("label attack AUC: the largest mean of norm and direction k=1 (and s^k_B's)")
    axes.set_title(f"{task}: what each defence costs and protects, per algorithm", fontsize=10)
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


def best_setting(cells: Sequence[Cell]) -> Cell | None:
    """Among one algorithm's cells, the lowest label attack whose mean cost is within the bound (or None)."""
    useful = [c for c in cells if c.finished and c.cost.mean >= -UTILITY_BOUND and not math.isnan(c.label_attack)]
    return min(useful, key=lambda c: c.label_attack) if useful else None


def verdict(cells: Sequence[Cell], task: str = TARGET_TASK) -> list[str]:
    """Each algorithm's best setting on ``task``, then the last line:
    ``BENCH privacy_worst_algorithm_attack_auc <v> auc target <= 0.60 MET|MISSED``."""
    mine = [c for c in cells if c.task == task]
    algorithms = list(dict.fromkeys(c.algorithm for c in mine))
    lines = [
        f"target, per algorithm on {task}: the mean strongest attack (every attack, every epoch, rows averaged "
        f"over epochs) <= {TARGET_AUC:.2f} at a mean utility cost within {UTILITY_BOUND:.2f} "
        "(paired by seed; 95 % intervals in brackets)"
    ]
    values: dict[str, float] = {}
    for algorithm in algorithms:
        own = [c for c in mine if c.algorithm == algorithm]
        best = best_setting(own)
        if best is None:
            lines.append(f"  {algorithm:<10} no finished setting within the cost bound")
            values[algorithm] = NAN
            continue
        values[algorithm] = best.label_attack
        mark = "meets" if best.label_attack <= TARGET_AUC else "misses"
        lines.append(
            f"  {algorithm:<10} {mark}: {best.setting} over {best.seeds} seeds, attack {best.label_attack:.3f} "
            f"(strongest {best.attacks['strongest_auc_run'].text()}, norm {best.attacks['norm_auc'].text()}, "
            f"direction {best.attacks['direction_auc_k1'].text()}), "
            f"cost {best.cost.text()}"
        )
        if best.label_attack > TARGET_AUC:
            frontier = sorted((c for c in own if c.finished), key=lambda c: c.label_attack)
            lines.extend(
                f"      frontier: {c.setting:<13} attack {c.label_attack:.3f}, cost {c.cost.text()}" for c in frontier
            )
    known = {a: v for a, v in values.items() if not math.isnan(v)}
    if not known:
        return [*lines, f"BENCH privacy_worst_algorithm_attack_auc nan auc target <= {TARGET_AUC:.2f} MISSED"]
    worst = max(known, key=lambda a: known[a])
    met = len(known) == len(values) and known[worst] <= TARGET_AUC
    lines.append(f"worst algorithm: {worst} ({known[worst]:.3f})")
    if len(known) < len(values):
        lines.append(f"not judged (no setting within the bound): {', '.join(sorted(set(values) - set(known)))}")
    lines.append(
        f"BENCH privacy_worst_algorithm_attack_auc {known[worst]:.3f} auc target <= {TARGET_AUC:.2f} "
        f"{'MET' if met else 'MISSED'}"
    )
    return lines
