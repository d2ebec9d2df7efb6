"""The distillation benchmark's outputs: its table in markdown, the per-task margins and gaps, and the BENCH line.

Scores arrive here in points (accuracy %, or R² × 100), per task and method, one value per
seed; everything is a mean ± sample standard deviation over seeds (``bench.common.stats``).
Kept apart from the runs so that the verdict can be tested, and the numbers re-rendered,
without training anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bench.algorithms.distill_runs import APFED, LABELS_ONLY, METHODS, SINGLE_VL, STUDENT, TEACHER
from bench.common.stats import mean_of, mean_std

#: The target: the student's mean at least the better active-only baseline's, on every task.
TARGET_PTS = 0.0
BENCH_NAME = "distill_vs_best_active_only"
#: Column titles by task, with the metric each is scored in.
TITLES = {
    "digits": "digits 3-1, accuracy %",
    "breast_cancer": "breast cancer, accuracy %",
    "diabetes": "diabetes, R² × 100",
}

#: task -> method -> score per seed, in points.
Table = Mapping[str, Mapping[str, Sequence[float]]]


def markdown_table(table: Table) -> str:
    """One row per method, one column per task, "mean ± std" in each cell."""
    tasks = list(table)
    lines = [
        "| Method | " + " | ".join(TITLES.get(task, task) for task in tasks) + " |",
        "|---|" + "---:|" * len(tasks),
    ]
    for method in METHODS:
        cells = [f"{mean:.2f} ± {std:.2f}" for mean, std in (mean_std(table[task][method]) for task in tasks)]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def margins(table: Table) -> dict[str, float]:
    """Per task: the student's mean − the better of SingleVL's and APFed's means, in points."""
    return {
        task: mean_of(row[STUDENT]) - max(mean_of(row[SINGLE_VL]), mean_of(row[APFED])) for task, row in table.items()
    }


def gap_closed(row: Mapping[str, Sequence[float]]) -> float:
    """The share (%) of the SingleVL → teacher gap the student closes; nan when the teacher is no better."""
    single, teacher = mean_of(row[SINGLE_VL]), mean_of(row[TEACHER])
    if teacher <= single:
        return math.nan
    return 100 * (mean_of(row[STUDENT]) - single) / (teacher - single)


def task_lines(table: Table, apfed_names: Mapping[str, str]) -> list[str]:
    """Per task: the margin over the better active-only baseline, the gap closed, and the teacher term's effect.

    The last compares the two students, which differ only in the teacher's share of the loss:
    what distillation adds over training the same model on the labels.
    """
    by_task = margins(table)
    lines = []
    for task, row in table.items():
        apfed = apfed_names.get(task, APFED)
        closed = gap_closed(row)
        closed_text = "n/a (the teacher is no better than SingleVL)" if math.isnan(closed) else f"{closed:.1f} %"
        lines.append(
            f"{task}: student − max(SingleVL, {apfed}) = {by_task[task]:+.2f} pts; "
            f"SingleVL → teacher gap ({mean_of(row[TEACHER]) - mean_of(row[SINGLE_VL]):+.2f} pts) "
            f"closed: {closed_text}; "
            f"student − label-only student = {mean_of(row[STUDENT]) - mean_of(row[LABELS_ONLY]):+.2f} pts"
        )
    return lines


def bench_line(table: Table) -> str:
    """The smallest margin over the tasks, against the target: the benchmark's one line."""
    value = min(margins(table).values(), default=math.nan)
    met = value >= TARGET_PTS
    return f"BENCH {BENCH_NAME} {value:.2f} pts target >= {TARGET_PTS:g} {'MET' if met else 'MISSED'}"
