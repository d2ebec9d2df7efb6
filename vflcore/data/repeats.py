"""Repeated IDs in a party's table: keep each ID's first row, and say which lines were dropped.

A repeated ID would be one sample with two feature rows, which no alignment can resolve;
keeping the first and saying how many were dropped is what a user can check and act on. The
warning points at the first dropped lines, never at an ID: no log line may hold one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import structlog

from vflcore.data.id_arrays import Repeats, arrow_ids, find_repeats

_DROPPED_LINES_SHOWN = 3

log = structlog.get_logger(__name__)


def warn_repeats(path: Path, id_column: str, repeats: Repeats, lines_of: Callable[[np.ndarray], list[int]]) -> None:
    """Log ``duplicate_ids_dropped``: how many IDs repeat, how many rows go, the first lines dropped.

    ``lines_of`` turns row positions into the file's line numbers; it is asked for three rows
    only, so a reader may find them by scanning the file.
    """
    log.warning(
        "duplicate_ids_dropped",
        file=str(path),
        column=id_column,
        duplicated_ids=repeats.repeated_ids,
        rows_dropped=len(repeats.dropped),
        first_dropped_lines=lines_of(repeats.dropped[:_DROPPED_LINES_SHOWN]),
    )


def first_occurrences(
    path: Path,
    id_column: str,
    ids: np.ndarray | pa.Array | pa.ChunkedArray,
    line_numbers: Sequence[int] | Callable[[np.ndarray], list[int]],
) -> np.ndarray | None:
    """Row positions to keep when IDs repeat (each ID's first row, ascending), or None if all are distinct.

    Logs the warning of ``warn_repeats`` when some are dropped. ``line_numbers`` is each row's
    line, or a function from row positions to lines (a reader that finds them only when asked).
    """
    values = ids if isinstance(ids, pa.Array | pa.ChunkedArray) else arrow_ids(ids)
    repeats = find_repeats(values)
    if repeats is None:
        return None
    lines_of = line_numbers if callable(line_numbers) else lambda rows: [line_numbers[i] for i in rows.tolist()]
    warn_repeats(path, id_column, repeats, lines_of)
    return repeats.keep
