"""Where the benches write: results in ``bench/out``, generated inputs in ``bench/.cache`` (both ignored by git)."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
#: Tables, CSVs and plots the benches write (``bench/out``).
OUT = BENCH / "out"
#: Generated input tables, written once and reused across runs (``bench/.cache``).
CACHE = BENCH / ".cache"
