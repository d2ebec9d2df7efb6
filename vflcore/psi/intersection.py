"""From pairwise matches to the aligned order: the common IDs sorted by their bytes, and each party's share.

The active party ends the exchange knowing, per passive party k, which of its own rows k also
holds and at which of k's upload positions (``vflcore.psi.matching``). The aligned rows are the
rows every party holds, in the order of their IDs' UTF-8 bytes: an order every party can check
from IDs it already has. Each passive party is told its upload positions of those IDs in that
order, and nothing else.

Everything is a numpy array of one integer (or string) per matched ID: no per-ID Python object,
so the cost follows the intersection, not the ID sets. IDs are compared as ``StringDType``,
whose order is the code-point order, which is exactly the order of the UTF-8 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.dtypes import StringDType

__all__ = ["AlignedOrder", "align_matches", "is_strictly_increasing"]


class AlignedOrder:
    """The common rows of the active party, in the agreed order, and each passive party's positions of them."""

    __slots__ = ("members", "pairwise", "rows")

    def __init__(self, rows: np.ndarray, members: dict[int, np.ndarray], pairwise: dict[int, int]) -> None:
        self.rows = rows
        self.members = members
        self.pairwise = pairwise


def as_strings(ids: np.ndarray) -> np.ndarray:
    """Any 1-D array of str-like IDs (object, ``str_``, ``StringDType``) as ``StringDType``."""
    return np.asarray(ids, dtype=StringDType())


def align_matches(
    ids: np.ndarray, matches: Mapping[int, tuple[np.ndarray, np.ndarray]], id_order: np.ndarray | None = None
) -> AlignedOrder:
    """The aligned order from ``matches[k] = (active rows, k's upload positions)``, pair by pair.

    ``ids`` are the active party's IDs by row. A row matched by one party but not by another is
    not aligned; ``pairwise`` keeps how many rows each party matched, as the active party learns it.
    ``id_order``: every row of ``ids`` in the IDs' sorted order (``vflcore.data.id_arrays.sort_order``),
    when the caller has it: the common rows are then picked out of it, where sorting their IDs
    again would take seconds at millions of rows.
    """
    by_party: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    common: np.ndarray | None = None
    for party, (rows, theirs) in matches.items():
        order = np.argsort(rows, kind="stable")
        rows_sorted, theirs_sorted = rows[order], theirs[order]
        by_party[party] = (rows_sorted, theirs_sorted)
        common = rows_sorted if common is None else np.intersect1d(common, rows_sorted, assume_unique=True)
    if common is None:
        common = np.zeros(0, dtype=np.int64)
    if id_order is None:
        common = common[np.argsort(as_strings(ids[common]), kind="stable")]
    else:
        chosen = np.zeros(len(ids), dtype=bool)
        chosen[common] = True
        common = id_order[chosen[id_order]].astype(np.int64)
    members = {
        party: theirs_sorted[np.searchsorted(rows_sorted, common)].astype(np.int64)
        for party, (rows_sorted, theirs_sorted) in by_party.items()
    }
    pairwise = {party: len(rows) for party, (rows, _) in by_party.items()}
    return AlignedOrder(common.astype(np.int64), members, pairwise)


def is_strictly_increasing(ids: np.ndarray) -> bool:
    """Whether ``ids`` are distinct and in the agreed order (UTF-8 bytes): what a passive party checks."""
    strings = as_strings(ids)
    return bool(np.all(strings[:-1] < strings[1:]))
