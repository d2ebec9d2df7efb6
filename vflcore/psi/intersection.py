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
    count = np.zeros(len(ids), dtype=np.int32)
    for rows, _ in matches.values():
        count[rows] += 1  # a party's rows are distinct (each of its IDs matched once at most)
    in_common = count == len(matches) if matches else np.zeros(len(ids), dtype=bool)
    del count
    if id_order is None:
        common = np.flatnonzero(in_common)
        common = common[np.argsort(as_strings(ids[common]), kind="stable")]
    else:
        common = id_order[in_common[id_order]].astype(np.int64)
    del in_common
    # Each party's upload position by active row, read at the common rows: two passes over
    # arrays, where a binary search of 8M rows in 8M took 8 s (every lookup a cache miss).
    by_row = np.empty(len(ids), dtype=np.int64)
    members: dict[int, np.ndarray] = {}
    for party, (rows, theirs) in matches.items():
        by_row[rows] = theirs
        members[party] = by_row[common]
    pairwise = {party: len(rows) for party, (rows, _) in matches.items()}
    return AlignedOrder(common.astype(np.int64), members, pairwise)


def is_strictly_increasing(ids: np.ndarray) -> bool:
    """Whether ``ids`` are distinct and in the agreed order (UTF-8 bytes): what a passive party checks."""
    strings = as_strings(ids)
    return bool(np.all(strings[:-1] < strings[1:]))
