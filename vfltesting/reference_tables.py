"""The row-by-row table reader as it was before the columnar one: a test oracle, never used by the product.

``vflcore.data.tables`` once built a Python object per cell (1M x 30 floats: 30 s, 4.2 GB). It
was replaced by ``vflcore.data.columnar`` with ``vflcore.data.exact_scan`` behind it, which must
give the same arrays and the same messages. This module keeps the old code, unchanged but for
names, so the tests can compare the two on every table and every bad file the suite has
(``tests/unit/vflcore/data/test_tables_reference.py``); and the digests, whose bytes key saved alignments.
"""

from __future__ import annotations

import csv
import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from vflcore.errors import DataError

__all__ = [
    "ReferenceTable",
    "reference_aligned_digest",
    "reference_ids_digest",
    "reference_read_party_csv",
    "reference_select_rows",
    "reference_write_aligned_ids",
]

_DROPPED_LINES_SHOWN = 3

log = structlog.get_logger("vflcore.data.tables")


@dataclass(frozen=True, eq=False)  # eq=False: comparing numpy arrays field by field is ambiguous
class ReferenceTable:
    """One party's rows: string IDs, float32 features and, for the active party, raw labels.

    `labels` stay float64 exactly as read; the caller casts them (int64 class ids or float32
    targets) because only the caller knows the task.
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


def reference_read_party_csv(
    path: Path,
    *,
    id_column: str = "id",
    label_column: str | None = None,
    feature_columns: Sequence[str] | None = None,
) -> ReferenceTable:
    """Read one party's table; features default to every column except the ID and label columns.

    A ``.parquet`` file is read with pyarrow (an integer ID column becomes its decimal string);
    anything else is read as CSV. Raises `DataError` for anything that would make training
    silently wrong, so a party finds out at startup rather than after the federation has begun.
    """
    path = Path(path)
    if path.suffix.lower() in PARQUET_SUFFIXES:
        header, rows, line_numbers = _read_parquet_rows(path)
    else:
        header, rows, line_numbers = _read_rows(path)
    id_index = _column_index(path, header, id_column, role="ID")
    label_index = None if label_column is None else _column_index(path, header, label_column, role="label")
    feature_names = _feature_names(path, header, id_column, label_column, feature_columns)
    feature_indices = [header.index(name) for name in feature_names]

    ids = _parse_ids(path, id_column, [row[id_index] for row in rows], line_numbers)
    keep = reference_first_occurrences(path, id_column, ids, line_numbers)
    if keep is not None:
        rows = [rows[i] for i in keep]
        line_numbers = [line_numbers[i] for i in keep]
        ids = ids[keep]
    features = _parse_numbers(path, feature_names, [[row[i] for i in feature_indices] for row in rows], line_numbers)
    labels = None
    if label_column is not None and label_index is not None:
        label_cells = [[row[label_index]] for row in rows]
        labels = _parse_numbers(path, [label_column], label_cells, line_numbers, dtype=np.float64)[:, 0]
    return ReferenceTable(
        ids=ids,
        features=features,
        feature_names=tuple(feature_names),
        labels=labels,
        source=path,
    )


def reference_select_rows(table: ReferenceTable, ids: np.ndarray) -> ReferenceTable:
    """The table's rows for ``ids``, in that order (the aligned order PSI agreed on)."""
    position = {value: n for n, value in enumerate(table.ids.tolist())}
    try:
        order = np.fromiter((position[value] for value in ids.tolist()), dtype=np.int64, count=len(ids))
    except KeyError:
        # no ID in the message: it reaches this party's log, and the server's with a failure report
        missing = sum(value not in position for value in ids.tolist())
        raise DataError(
            f"{table.source}: {missing} of the {len(ids)} aligned IDs are not in this table; "
            "the alignment was made for other data: remove the saved alignment (psi folder) and run the job again"
        ) from None
    return ReferenceTable(
        ids=table.ids[order],
        features=table.features[order],
        feature_names=table.feature_names,
        labels=None if table.labels is None else table.labels[order],
        source=table.source,
    )


def reference_aligned_digest(ids: np.ndarray) -> np.ndarray:
    """SHA-256 of an ID list in its order, as 32 uint8: every party's aligned list must match."""
    digest = hashlib.sha256()
    for value in ids.tolist():
        digest.update(str(value).encode("utf-8") + b"\n")
    return np.frombuffer(digest.digest(), dtype=np.uint8).copy()


#: Who may read ``aligned_ids.csv``: the party's own user.
ALIGNED_IDS_MODE = 0o600


def reference_write_aligned_ids(directory: Path, ids: np.ndarray) -> Path:
    """Write the aligned IDs, one per line in the agreed order, for a person to inspect.

    Mode 0600, the owner alone, whatever the umask: the list says who is a customer of every
    party, which is what PSI exists to keep from everyone else on the host.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "aligned_ids.csv"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, ALIGNED_IDS_MODE)
    os.fchmod(fd, ALIGNED_IDS_MODE)  # also a file an older version wrote with the umask's mode
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id"])
        writer.writerows([value] for value in ids.tolist())
    return path


def reference_ids_digest(ids: np.ndarray) -> bytes:
    """SHA-256 over the sorted IDs, each UTF-8 encoded and followed by a newline.

    It fingerprints a party's ID set: a saved PSI result is reused only while every party's
    fingerprint is unchanged (``vflcore.psi.cache``).
    `read_party_csv` rejects IDs containing line breaks, so the newline framing is unambiguous.
    """
    digest = hashlib.sha256()
    for value in sorted(str(v) for v in ids):
        digest.update(value.encode("utf-8"))
        digest.update(b"\n")
    return digest.digest()


PARQUET_SUFFIXES = (".parquet", ".pq")


def _read_parquet_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """A Parquet file as header and string rows, so it passes the same checks as a CSV.

    Row numbers in messages are 1-based data rows (there is no header line in Parquet).
    """
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the path in the party's data setting")
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow; pip install pyarrow") from None
    except Exception as exc:  # pyarrow raises its own error types for corrupt files
        raise DataError(f"{path}: not a readable Parquet file: {exc}") from exc
    header = [str(name) for name in table.column_names]
    columns = [["" if v is None else str(v) for v in table.column(name).to_pylist()] for name in header]
    rows = [list(values) for values in zip(*columns, strict=True)] if columns else []
    return header, rows, list(range(1, len(rows) + 1))


def _read_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Read header and data rows, skipping blank lines; keep each row's line number for errors."""
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the path in the party's data setting")
    try:
        # utf-8-sig: spreadsheets often write a byte-order mark that would otherwise stick to
        # the first column name and make the ID column "missing".
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next((row for row in reader if row), None)
            if header is None:
                raise DataError(f"{path}: file is empty; it needs a header line naming the columns")
            header = [name.strip() for name in header]
            _check_header(path, header)
            rows: list[list[str]] = []
            line_numbers: list[int] = []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise DataError(
                        f"{path}: line {reader.line_num} has {len(row)} fields but the header has "
                        f"{len(header)}; fix the row (a stray comma or an unquoted comma in a value)"
                    )
                rows.append(row)
                line_numbers.append(reader.line_num)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason}); re-save the file as UTF-8 CSV") from exc
    except csv.Error as exc:
        raise DataError(f"{path}: malformed CSV ({exc}); fix the quoting in the file") from exc
    if not rows:
        raise DataError(f"{path}: header found but no data rows; the party needs at least one row")
    return header, rows, line_numbers


def _check_header(path: Path, header: list[str]) -> None:
    """Reject blank or repeated column names, which would make column lookup ambiguous."""
    if any(name == "" for name in header):
        raise DataError(f"{path}: the header has an empty column name; give every column a name")
    repeated = sorted(name for name, count in Counter(header).items() if count > 1)
    if repeated:
        raise DataError(f"{path}: column names appear more than once: {repeated}; rename them")


def _column_index(path: Path, header: list[str], column: str, *, role: str) -> int:
    if column not in header:
        raise DataError(
            f"{path}: {role} column {column!r} not found; columns found: {header}. "
            f"Rename the column in the file or set the {role} column name in the config"
        )
    return header.index(column)


def _feature_names(
    path: Path,
    header: list[str],
    id_column: str,
    label_column: str | None,
    feature_columns: Sequence[str] | None,
) -> list[str]:
    reserved = {id_column} if label_column is None else {id_column, label_column}
    if feature_columns is None:
        return [name for name in header if name not in reserved]
    missing = [name for name in feature_columns if name not in header]
    if missing:
        raise DataError(
            f"{path}: feature columns {missing} not found; columns found: {header}. "
            "Fix the feature column list in the config"
        )
    clashing = [name for name in feature_columns if name in reserved]
    if clashing:
        raise DataError(
            f"{path}: columns {clashing} are listed as features but are the ID or label column; "
            "remove them from the feature column list"
        )
    repeated = sorted(name for name, count in Counter(feature_columns).items() if count > 1)
    if repeated:
        raise DataError(f"{path}: feature columns {repeated} are listed more than once; list each once")
    return list(feature_columns)


def _parse_ids(path: Path, id_column: str, values: list[str], line_numbers: list[int]) -> np.ndarray:
    """Keep IDs exactly as written, but refuse empty IDs and IDs with line breaks or control characters."""
    for value, line in zip(values, line_numbers, strict=True):
        if not value.strip():
            raise DataError(f"{path}: line {line}, column {id_column!r}: empty ID; give the row an ID or remove it")
        if "\n" in value or "\r" in value:
            raise DataError(
                f"{path}: line {line}, column {id_column!r}: the ID contains a line break; "
                "IDs must be single-line strings"
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            # numpy's fixed-width strings drop trailing NULs, so such IDs would silently merge
            raise DataError(
                f"{path}: line {line}, column {id_column!r}: the ID contains a control character; "
                "IDs must be printable text"
            )
    ids = np.empty(len(values), dtype=object)
    ids[:] = values
    return ids


def reference_first_occurrences(
    path: Path, id_column: str, ids: np.ndarray, line_numbers: Sequence[int]
) -> np.ndarray | None:
    """Row positions to keep when IDs repeat (the first row of each ID), or None if all are distinct.

    A repeated ID would be one sample with two feature rows, which no alignment can resolve;
    keeping the first and saying how many were dropped is what a user can check and act on. The
    warning points at the first dropped lines, never at an ID: no log line may hold one.
    """
    _, first = np.unique(ids.astype(str), return_index=True)
    if len(first) == len(ids):
        return None
    counts = Counter(ids.tolist())
    duplicated = sum(count > 1 for count in counts.values())
    dropped = np.setdiff1d(np.arange(len(ids)), first)
    log.warning(
        "duplicate_ids_dropped",
        file=str(path),
        column=id_column,
        duplicated_ids=duplicated,
        rows_dropped=len(dropped),
        first_dropped_lines=[line_numbers[i] for i in dropped[:_DROPPED_LINES_SHOWN].tolist()],
    )
    return np.sort(first)


def _parse_numbers(
    path: Path,
    columns: Sequence[str],
    cells: list[list[str]],
    line_numbers: list[int],
    dtype: type[np.floating] = np.float32,
) -> np.ndarray:
    """Convert string cells to a finite float array, naming the first bad cell's line and column."""
    if not columns:
        return np.zeros((len(cells), 0), dtype=dtype)
    try:
        values = np.array([[float(cell) for cell in row] for row in cells], dtype=np.float64)
    except ValueError:
        raise _non_number_error(path, columns, cells, line_numbers) from None
    with np.errstate(over="ignore"):  # overflow to inf is reported below, with its location
        converted = values.astype(dtype)
    finite = np.isfinite(converted)
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        raise DataError(
            f"{path}: line {line_numbers[row]}, column {columns[col]!r}: value {cells[row][col]!r} is not "
            f"a finite number (NaN, inf, or too large for {np.dtype(dtype).name}); "
            "impute or drop the row before training"
        )
    return converted


def _non_number_error(path: Path, columns: Sequence[str], cells: list[list[str]], line_numbers: list[int]) -> DataError:
    """Build the error for the first cell `float()` rejects; only called once conversion failed."""
    for row, line in zip(cells, line_numbers, strict=True):
        for column, cell in zip(columns, row, strict=True):
            try:
                float(cell)
            except ValueError:
                what = "empty value" if not cell.strip() else f"value {cell!r} is not a number"
                return DataError(
                    f"{path}: line {line}, column {column!r}: {what}; "
                    "every feature and label value must be numeric, so fill it in or drop the row"
                )
    return DataError(f"{path}: a value could not be read as a number; check the numeric columns")
