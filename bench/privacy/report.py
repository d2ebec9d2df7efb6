"""The privacy bench's output: a line per run, a CSV of every run, the cells' table, the frontier plot, the verdict.

Everything here reads ``Outcome``s and the cells made of them (``bench.privacy.cells``); nothing
trains. The verdict follows issue 48's target, per algorithm, over every task run (by default two,
one of them imbalanced): among the algorithm's settings whose mean paired utility cost is within
``UTILITY_BOUND`` on every task (the undefended setting is one of them: cost 0), the best is the
one with the lowest label attack on its worst task (a cell's label attack is the
largest mean among ``bench.privacy.cells.LABEL_ATTACKS``: the strongest attacker over the whole run,
issue 48's maximum over every attack, and the norm and direction k = 1 attacks, for VIMADMM and
VIMADMM-J on s^k_B too). The value is the worst algorithm's best; it meets the target at ``TARGET_AUC`` or below.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common.plots import pyplot
from bench.privacy.cells import UNDEFENDED, Cell
from bench.privacy.runs import ATTACKS, NAN, OVER_EPOCHS, Outcome

TARGET_AUC = 0.60
UTILITY_BOUND = 0.01

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
    """The cells as ``docs/explanation/privacy.md`` shows them: mean [95 % interval] over the seeds."""
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


def plot(cells: Sequence[Cell], path: Path) -> Path | None:
    """Each algorithm's frontier in a panel of its own: cell label attack against mean cost, a marker per task.

    Bars are the cost's 95 % interval over the seeds; the target's lines (attack ``TARGET_AUC``,
    cost ``UTILITY_BOUND``) are drawn in every panel.
    """
    shown = [c for c in cells if c.finished and not math.isnan(c.label_attack)]
    if not shown:
        return None
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    algorithms = list(dict.fromkeys(c.algorithm for c in shown))
    tasks = list(dict.fromkeys(c.task for c in shown))
    columns = min(4, len(algorithms))
    rows = math.ceil(len(algorithms) / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.6 * rows), squeeze=False, sharey=True)
    markers = "os^vD<>pP*"
    for panel, algorithm in zip(grid.flat, algorithms, strict=False):
        for index, task in enumerate(tasks):
            points = [c for c in shown if c.algorithm == algorithm and c.task == task]
            spread = [
                [0.0 if math.isnan(c.cost.low) else max(c.cost.mean - c.cost.low, 0) for c in points],
                [0.0 if math.isnan(c.cost.high) else max(c.cost.high - c.cost.mean, 0) for c in points],
            ]
            panel.errorbar(
                [c.cost.mean for c in points],
                [c.label_attack for c in points],
                xerr=spread,
                marker=markers[index % len(markers)],
                capsize=2,
                linestyle="none",
                label=task,
            )
            for c in points:
                panel.annotate(
                    c.setting, (c.cost.mean, c.label_attack), fontsize=5, xytext=(2, 2), textcoords="offset points"
                )
        panel.axhline(TARGET_AUC, linestyle="--", color="grey", linewidth=1)
        panel.axvline(-UTILITY_BOUND, linestyle=":", color="grey", linewidth=1)
        panel.set_title(algorithm, fontsize=9)
        panel.grid(alpha=0.3)
        panel.tick_params(labelsize=7)
    for panel in list(grid.flat)[len(algorithms) :]:
        panel.axis("off")
    grid.flat[0].legend(fontsize=7)
    figure.supxlabel(
        "test ROC AUC cost, paired by seed (mean; bars: 95 % interval; dotted: the cost bound)", fontsize=8
    )
    figure.supylabel(f"strongest label attack AUC (mean; dashed: target {TARGET_AUC:.2f})", fontsize=8)
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


@dataclass(frozen=True)
class Setting:
    """One algorithm's setting over the judged tasks: its worst attack and worst mean cost among them."""

    setting: str
    cells: tuple[Cell, ...]

    @property
    def attack(self) -> float:
        """The largest cell label attack over the tasks (NaN if a task has none)."""
        values = [c.label_attack for c in self.cells]
        return NAN if any(math.isnan(v) for v in values) else max(values)

    @property
    def cost(self) -> float:
        """The worst (most negative) mean cost over the tasks."""
        return min(c.cost.mean for c in self.cells)

    def affordable(self) -> bool:
        """Finished on every task, each task's mean cost within ``UTILITY_BOUND``, and an attack figure on each."""
        return all(c.finished and c.cost.mean >= -UTILITY_BOUND for c in self.cells) and not math.isnan(self.attack)

    def text(self) -> str:
        return ", ".join(
            f"{c.task} attack {c.label_attack:.3f} (strongest {c.attacks['strongest_auc_run'].text()}) "
            f"cost {c.cost.text()} over {c.seeds} seeds"
            for c in self.cells
        )


def settings_over_tasks(cells: Sequence[Cell], tasks: Sequence[str]) -> list[Setting]:
    """One algorithm's settings that ran on every one of ``tasks``, each with its cells in ``tasks`` order."""
    by = {(c.setting, c.task): c for c in cells}
    names = dict.fromkeys(c.setting for c in cells)
    return [Setting(n, tuple(by[(n, t)] for t in tasks)) for n in names if all((n, t) in by for t in tasks)]


def best_setting(settings: Sequence[Setting]) -> Setting | None:
    """The lowest attack among the affordable settings (the undefended one is, at cost 0), or None."""
    useful = [s for s in settings if s.affordable()]
    return min(useful, key=lambda s: s.attack) if useful else None


def verdict(cells: Sequence[Cell]) -> list[str]:
    """Each algorithm's best setting over every task the cells hold, then the last line:
    ``BENCH privacy_worst_algorithm_attack_auc <v> auc target <= 0.60 MET|MISSED``.

    A setting is judged by its worst task: its attack is the largest of its tasks' cell label
    attacks, and it is affordable only if every task's mean paired cost is within ``UTILITY_BOUND``.
    """
    tasks = list(dict.fromkeys(c.task for c in cells))
    algorithms = list(dict.fromkeys(c.algorithm for c in cells))
    lines = [
        f"target, per algorithm over {', '.join(tasks) or 'no task'}: the mean strongest attack (every attack, every "
        f"epoch, rows averaged over epochs), worst task, <= {TARGET_AUC:.2f} at a mean utility cost within "
        f"{UTILITY_BOUND:.2f} on every task (paired by seed; 95 % intervals in brackets)"
    ]
    values: dict[str, float] = {}
    for algorithm in algorithms:
        own = settings_over_tasks([c for c in cells if c.algorithm == algorithm], tasks)
        best = best_setting(own)
        if best is None:
            lines.append(f"  {algorithm:<10} no finished setting within the cost bound on every task")
            values[algorithm] = NAN
            continue
        values[algorithm] = best.attack
        mark = "meets" if best.attack <= TARGET_AUC else "misses"
        lines.append(f"  {algorithm:<10} {mark}: {best.setting}, attack {best.attack:.3f}: {best.text()}")
        ran = [s for s in own if all(c.finished for c in s.cells)]  # a refused setting has no point to show
        frontier = sorted(ran, key=lambda s: (math.isnan(s.attack), s.attack))
        lines.extend(
            f"      frontier: {s.setting:<17} attack {s.attack:.3f}, worst cost {s.cost:+.3f}" for s in frontier
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
