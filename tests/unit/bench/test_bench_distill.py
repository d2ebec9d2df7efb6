"""``make bench-distill`` end to end in seconds: ``--quick`` in this process, and the verdict on made-up scores.

The quick run trains every method of every task for two epochs, so it checks that the benchmark
runs and that its report has the shape the issue asks for, never what the scores are.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.algorithms.distill import main
from bench.algorithms.distill_report import bench_line
from bench.algorithms.distill_runs import METHODS, TASKS

BENCH = re.compile(r"^BENCH distill_vs_best_active_only -?\d+\.\d+ pts target >= 0 (MET|MISSED)$")
CELL = re.compile(r"^-?\d+\.\d+ ± \d+\.\d+$")


def test_quick_run_reports_every_method_on_every_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Five method rows of three "mean ± std" cells, a line per task, and the BENCH line printed last."""
    assert main(["--quick", "--workers", "0", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    assert BENCH.match(printed[-1]), printed[-1]

    report = (tmp_path / "distill_quick.md").read_text(encoding="utf-8")
    assert report.rstrip("\n").splitlines()[-1] == printed[-1]
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in report.splitlines() if line.startswith("| ")}
    for method in METHODS:
        cells = [cell.strip() for cell in rows[method].strip("| ").split(" | ")[1:]]
        assert len(cells) == len(TASKS) and all(CELL.match(cell) for cell in cells), rows[method]
    for task in TASKS:
        assert any(line.startswith(f"- {task}: student − max(SingleVL, APFed-") for line in report.splitlines())


def test_the_smallest_margin_over_the_tasks_is_the_verdict() -> None:
    """The student must match the better of SingleVL and APFed on every task: one task behind is MISSED."""
    ahead = {"SingleVL": [80.0, 82.0], "APFed": [81.0, 83.0], "Teacher (SplitNN)": [90.0, 90.0]}
    table = {
        "digits": {**ahead, "Student (distilled)": [83.0, 84.0], "Student (labels only)": [80.0, 80.0]},
        "diabetes": {**ahead, "Student (distilled)": [81.5, 82.0], "Student (labels only)": [80.0, 80.0]},
    }
    assert bench_line(table) == "BENCH distill_vs_best_active_only -0.25 pts target >= 0 MISSED"
    table["diabetes"]["Student (distilled)"] = [82.0, 83.0]
    assert bench_line(table) == "BENCH distill_vs_best_active_only 0.50 pts target >= 0 MET"
