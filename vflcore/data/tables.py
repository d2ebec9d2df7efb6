"""Read one party's table into arrays, and put its rows into the order every party shares.

Each party keeps its own CSV or Parquet file with an ID column. This module turns that file into
a `PartyTable` (IDs, float32 features, optional raw labels) and refuses, with a message that
names the file, column and line, anything training would silently get wrong: missing columns,
non-numeric or non-finite values, empty IDs. Repeated IDs keep their first row, with a warning
and a count.

Reading is columnar (``vflcore.data.columnar``: pyarrow into one float32 array, no Python object
per cell or per row); a file it cannot vouch for is read again row by row
(``vflcore.data.exact_scan``), which gives the message with its line.

PSI (``vflcore.psi``) finds the IDs all parties share and their order; ``select_rows`` then
puts a table into that order. ``ids_digest`` fingerprints a party's ID set (to decide whether a
saved alignment still fits); ``aligned_digest`` fingerprints an aligned ID list, so parties can
confirm they agree on it. These work on whole arrays (``vflcore.data.id_arrays``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflcore.data import id_arrays
from vflcore.data.columnar import read_columnar
from vflcore.data.exact_scan import read_exactly
from vflcore.data.repeats import first_occurrences
from vflcore.errors import DataError

__all__ = [
    "DataError",
    "PartyTable",
    "align_rows",
    "aligned_digest",
    "first_occurrences",
    "ids_digest",
    "read_party_csv",
    "select_rows",
    "take_rows",
    "write_aligned_ids",
]


@dataclass(frozen=True, eq=False)  # eq=False: comparing numpy arrays field by field is ambiguous
class PartyTable:
    """One party's rows: string IDs, float32 features and, for the active party, raw labels.

    `ids` is a numpy ``StringDType`` array when read from a file: each element is a ``str``, with
    no Python object per row behind it. (``np.asarray(ids, dtype=str)`` cannot size it; use
    ``vflcore.data.id_arrays.fixed_width``.) `labels` stay float64 exactly as read; the caller
    casts them (int64 class ids or float32 targets) because only the caller knows the task.
    """

    ids: np.ndarray
    features: np.ndarray
    feature_names: tuple[str, ...]
    labels: np.ndarray | None
    source: Path

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.features.ndim != 2 or self.features.shape != (n, len(self.feature_names)):
            raise ValueError(
                f"{self.source}: features have shape {self.features.shape}, expected "
                f"({n}, {len(self.feature_names)}) for {n} IDs and {len(self.feature_names)} feature names"
            )
        if self.labels is not None and self.labels.shape != (n,):
            raise ValueError(f"{self.source}: labels have shape {self.labels.shape}, expected ({n},)")

    @property
    def num_rows(self) -> int:
        """Number of rows (samples) in the table."""
        return len(self.ids)


def read_party_csv(
    path: Path,
    *,
    id_column: str = "id",
    label_column: str | None = None,
    feature_columns: Sequence[str] | None = None,
) -> PartyTable:
    """Read one party's table; features default to every column except the ID and label columns.

    A ``.parquet`` file is read with pyarrow (an integer ID column becomes its decimal string);
    anything else is read as CSV. Raises `DataError` for anything that would make training
    silently wrong, so a party finds out at startup rather than after the federation has begun.
    """
    path = Path(path)
    arrays = read_columnar(
        path, id_column=id_column, label_column=label_column, feature_columns=feature_columns
    ) or read_exactly(path, id_column=id_column, label_column=label_column, feature_columns=feature_columns)
    return PartyTable(
        ids=arrays.ids,
        features=arrays.features,
        feature_names=arrays.feature_names,
        labels=arrays.labels,
        source=path,
    )


def select_rows(table: PartyTable, ids: np.ndarray) -> PartyTable:
    """The table's rows for ``ids``, in that order (the aligned order PSI agreed on)."""
    ids = np.asarray(ids)
    if _same_ids(table.ids, ids):
        # Every row aligns, already in the agreed order (a table kept sorted by ID): the table is
        # its own aligned table. Compared a block at a time, so this holds no row-sized temporary;
        # the hash join below would hold about 90 bytes a row (0.9 GB at 10M) to find the same.
        return table
    order, missing = id_arrays.positions(table.ids, np.asarray(ids))
    if missing:
        # no ID in the message: it reaches this party's log, and the server's with a failure report
        raise DataError(
            f"{table.source}: {missing} of the {len(ids)} aligned IDs are not in this table; "
            "the alignment was made for other data: remove the saved alignment (psi folder) and run the job again"
        )
    return take_rows(table, order)


def take_rows(table: PartyTable, rows: np.ndarray) -> PartyTable:
    """The table's ``rows``, in that order: what PSI found, so no ID has to be looked up again.

    ``select_rows`` finds the rows of an ID list by a hash join (about 90 bytes a row held while
    it runs); PSI already knows each aligned ID's row, and hands it here.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == table.num_rows and _is_identity(rows):
        return table
    return PartyTable(
        ids=table.ids[rows],
        features=table.features[rows],
        feature_names=table.feature_names,
        labels=None if table.labels is None else table.labels[rows],
        source=table.source,
    )


def _is_identity(rows: np.ndarray, block: int = 1 << 20) -> bool:
    """Whether ``rows`` is 0, 1, 2, ...; a block at a time, so the check holds no row-sized temporary."""
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        if not np.array_equal(part, np.arange(start, start + len(part), dtype=part.dtype)):
            return False
    return True


def _same_ids(table_ids: np.ndarray, ids: np.ndarray, block: int = 1 << 20) -> bool:
    """Whether ``ids`` is the table's own ID column, element for element; a block at a time.

    A copy of the table's features (1.2 GB at 10M x 30) is what this saves, so it must not make a
    row-sized temporary of its own.
    """
    if len(table_ids) != len(ids):
        return False
    for start in range(0, len(ids), block):
        mine, theirs = table_ids[start : start + block], ids[start : start + block]
        try:
            if not bool(np.all(mine == theirs)):
                return False
        except (TypeError, np.exceptions.DTypePromotionError):  # e.g. integer IDs against strings
            return False
    return True


def aligned_digest(ids: np.ndarray) -> np.ndarray:
    """SHA-256 of an ID list in its order, as 32 uint8: every party's aligned list must match.

    Each ID is UTF-8 encoded and followed by a newline (``str(value)`` for a non-string).
    """
    return id_arrays.aligned_digest(ids)


#: Who may read ``aligned_ids.csv``: the party's own user.
ALIGNED_IDS_MODE = 0o600


def write_aligned_ids(directory: Path, ids: np.ndarray) -> Path:
    """Write the aligned IDs, one per line in the agreed order, for a person to inspect.

    Mode 0600, the owner alone, whatever the umask: the list says who is a customer of every
    party, which is what PSI exists to keep from everyone else on the host.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "aligned_ids.csv"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ALIGNED_IDS_MODE)
    os.fchmod(fd, ALIGNED_IDS_MODE)  # also a file an older version wrote with the umask's mode
    with os.fdopen(fd, "wb") as fh:
        fh.write(b"id\r\n")  # the rows csv.writer wrote: QUOTE_MINIMAL, \r\n line ends
        for part in id_arrays.quoted_id_lines(np.asarray(ids)):
            fh.write(part)
    return path


def align_rows(table: PartyTable) -> PartyTable:
    """Return the table with rows sorted by ID (string order).

    Sorted IDs are the order PSI agrees on, so tables already restricted to the common IDs and
    sorted this way are aligned by hand: what the reference implementation and tests use.
    """
    order = np.argsort(table.ids, kind="stable")
    return PartyTable(
        ids=table.ids[order],
        features=table.features[order],
        feature_names=table.feature_names,
        labels=None if table.labels is None else table.labels[order],
        source=table.source,
    )


def ids_digest(ids: np.ndarray) -> bytes:
    """SHA-256 over the sorted IDs, each UTF-8 encoded and followed by a newline.

    It fingerprints a party's ID set: a saved PSI result is reused only while every party's
    fingerprint is unchanged (``vflcore.psi.cache``).
    `read_party_csv` rejects IDs containing line breaks, so the newline framing is unambiguous.
    """
    return id_arrays.ids_digest(ids)
