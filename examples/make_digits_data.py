"""Write the demo's three party CSVs from scikit-learn's bundled datasets (works offline).

    python examples/make_digits_data.py --out examples/data            # digits, classification
    python examples/make_digits_data.py --task regression --out examples/data-diabetes

Digits: party1.csv = id, label, pixel rows 0-2; party2.csv = rows 3-5; party3.csv = rows 6-7.
Diabetes: party1.csv = id, label, features 0-3; party2.csv = 4-6; party3.csv = 7-9.
The splitting itself lives in `vfltesting.datasets`; this script is only its command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vfltesting.datasets import write_diabetes_split, write_digits_split

_WRITERS = {"classification": write_digits_split, "regression": write_diabetes_split}
_DEFAULT_OUT = {
    "classification": Path(__file__).parent / "data",
    "regression": Path(__file__).parent / "data-diabetes",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(_WRITERS), default="classification")
    parser.add_argument("--out", type=Path, help="output directory (default: examples/data, or data-diabetes)")
    parser.add_argument("--seed", type=int, default=0, help="seed for each party's row order")
    args = parser.parse_args(argv)
    out_dir = args.out if args.out is not None else _DEFAULT_OUT[args.task]
    for path in _WRITERS[args.task](out_dir, seed=args.seed):
        with path.open(encoding="utf-8") as handle:
            columns = handle.readline().rstrip("\n").split(",")
            rows = sum(1 for _ in handle)
        print(f"wrote {path}: {rows} rows, {len(columns)} columns ({', '.join(columns[:3])}, ...)")


if __name__ == "__main__":
    main()
