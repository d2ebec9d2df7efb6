"""How an algorithm bench ends: its markdown report written, printed, and its BENCH line last.

The report file ends with the BENCH line too, so it says what was measured and whether the
target was met; on the terminal that line comes once, last, where ``make bench`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def publish(lines: Sequence[str], bench: str, path: Path, plots: Sequence[Path] = ()) -> int:
    """Write ``lines`` and then ``bench`` to ``path``; print them, where they went, and ``bench`` last. Returns 0."""
    report = "\n".join([*lines, bench, ""])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report, encoding="utf-8")
    print()
    print(report.removesuffix(bench + "\n").rstrip())
    where = f"\nreport: {path}"
    if plots:
        where += f"\n{'plot' if len(plots) == 1 else 'plots'}: {', '.join(map(str, plots))}"
    print(where)
    print(bench)
    return 0
