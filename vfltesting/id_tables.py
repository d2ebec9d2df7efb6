"""Party tables built from given IDs, for the tests where what matters is which IDs each party holds.

The PSI tests write each party's CSV from a list of IDs in the order given (duplicates and all),
and compare what the alignment found with plain Python's set intersection.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["customer_ids", "intersection", "write_party_csv"]


def write_party_csv(path: Path, ids: Sequence[str], *, label: bool = False, id_column: str = "id") -> Path:
    """One party's CSV: the IDs in the given order, feature ``x`` = row number, and maybe a label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([id_column, "x", *(["label"] if label else [])])
        for n, value in enumerate(ids):
            writer.writerow([value, n, *([n % 2] if label else [])])
    return path


def intersection(parties: Mapping[int, Sequence[str]]) -> set[str]:
    """The IDs every party holds."""
    return set.intersection(*(set(ids) for ids in parties.values()))


def customer_ids(numbers: Sequence[int]) -> list[str]:
    """``customer-000042`` for 42: IDs whose sorted order is their numbers' order."""
    return [f"customer-{n:06d}" for n in numbers]
