"""The row-by-row reader: the exact message (file, line, column) for a table the columnar reader refused.

``vflcore.data.columnar`` reads a valid table with pyarrow and hands anything unusual here: a
bad cell, a wrong field count, an encoding error, or a number Python reads and Arrow does not
(``1_000``). This reader decides cell by cell with Python's csv module and ``float``, as every
earlier version did, so a file gets the same table or the same message as before. It reads the
file twice (a batch of rows at a time, so memory stays bounded at 10M rows): the first pass
checks the structure and the IDs, the second the numbers of the rows kept.

The first failing check is reported, in this order: the file's structure (encoding, quoting,
field counts, in file order), data rows present, the columns, each ID (in file order), then, on
the rows kept once repeated IDs are dropped, the features (a non-number anywhere before a
non-finite value) and then the labels. A CSV's messages name the line, a Parquet file's the row
(1-based, as a person counts them).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa

from vflcore.data.columns import (
    TableColumns,
    check_header,
    is_parquet,
    missing_file,
    resolve_columns,
)
from vflcore.data.csv_lines import first_undecodable_line
from vflcore.data.id_arrays import MAX_ID_BYTES, STRING_IDS, arrow_ids, find_repeats
from vflcore.data.repeats import warn_repeats
from vflcore.errors import DataError

if TYPE_CHECKING:
    from _csv import Reader

_BATCH_ROWS = 1 << 16


@dataclass(frozen=True)
class TableArrays:
    """What a reader hands ``PartyTable``: IDs, float32 features with their names, float64 labels."""

    ids: np.ndarray
    features: np.ndarray
    feature_names: tuple[str, ...]
    labels: np.ndarray | None


class _Batch(Protocol):
    @property
    def lines(self) -> Sequence[int]: ...

    def column(self, index: int) -> list[str]: ...


class _Source(Protocol):
    @property
    def header(self) -> list[str]: ...

    @property
    def unit(self) -> str: ...

    def batches(self) -> Iterator[_Batch]: ...


def read_exactly(
    path: Path, *, id_column: str, label_column: str | None, feature_columns: Sequence[str] | None
) -> TableArrays:
    """Read ``path`` row by row; raises `DataError` with the first problem's file, line and column."""
    parquet = is_parquet(path)
    source: _Source = _ParquetSource(path) if parquet else _CsvSource(path)
    columns: TableColumns | None = None
    try:
        columns = resolve_columns(
            path, source.header, id_column=id_column, label_column=label_column, feature_columns=feature_columns
        )
    except DataError as exc:
        unresolved: DataError | None = exc
    else:
        unresolved = None

    id_parts: list[np.ndarray] = []
    line_parts: list[np.ndarray] = []
    id_error: DataError | None = None
    rows = 0
    for batch in source.batches():  # the whole file, even past a bad ID: a structural error comes first
        rows += len(batch.lines)
        if columns is not None and id_error is None:
            cells = batch.column(columns.id_index)
            id_error = _id_error(f"{path}: {source.unit}", id_column, cells, batch.lines)
            if id_error is None:  # past a bad ID the IDs are never used, and one not UTF-8 cannot be held
                id_parts.append(np.array(cells, dtype=STRING_IDS))
                line_parts.append(np.asarray(batch.lines, dtype=np.int64))
    if rows == 0 and not parquet:
        raise DataError(f"{path}: header found but no data rows; the party needs at least one row")
    if unresolved is not None:
        raise unresolved
    assert columns is not None
    if rows == 0:
        raise DataError(f"{path}: no data rows; the party needs at least one row")
    if id_error is not None:
        raise id_error

    ids = np.concatenate(id_parts)
    lines = np.concatenate(line_parts)
    kept = np.ones(rows, dtype=bool)
    repeats = find_repeats(arrow_ids(ids))
    if repeats is not None:
        warn_repeats(path, id_column, repeats, lambda positions: lines[positions].tolist())
        kept[repeats.dropped] = False
        ids = ids[repeats.keep]
    features, labels = _numbers_of_kept_rows(f"{path}: {source.unit}", source, columns, label_column, kept)
    return TableArrays(ids, features, columns.feature_names, labels)


def _numbers_of_kept_rows(
    where: str, source: _Source, columns: TableColumns, label_column: str | None, kept: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """The second pass: float32 features and float64 labels of the kept rows, or the first bad cell."""
    feature_parts: list[np.ndarray] = []
    label_parts: list[np.ndarray] = []
    feature_not_finite: DataError | None = None
    label_error: DataError | None = None
    at = 0
    for batch in source.batches():
        here = np.flatnonzero(kept[at : at + len(batch.lines)]).tolist()
        at += len(batch.lines)
        lines = [batch.lines[r] for r in here]
        feature_columns = [batch.column(i) for i in columns.feature_indices]
        cells = [[column[r] for column in feature_columns] for r in here]
        values, not_number, not_finite = _parse_numbers(where, columns.feature_names, cells, lines, np.float32)
        if not_number is not None:
            raise not_number  # the first non-number among the kept rows: nothing can come before it
        feature_not_finite = feature_not_finite or not_finite
        feature_parts.append(values)
        if columns.label_index is not None and label_column is not None:
            label_cells = batch.column(columns.label_index)
            label_values, not_number, not_finite = _parse_numbers(
                where, (label_column,), [[label_cells[r]] for r in here], lines, np.float64
            )
            label_error = label_error or not_number or not_finite
            label_parts.append(label_values[:, 0])
    if feature_not_finite is not None:
        raise feature_not_finite
    if label_error is not None:
        raise label_error
    labels = np.concatenate(label_parts) if columns.label_index is not None else None
    return np.concatenate(feature_parts), labels


def _id_error(where: str, id_column: str, values: list[str], lines: Sequence[int]) -> DataError | None:
    """The first bad ID in file order: empty, not UTF-8, over ``MAX_ID_BYTES``, a line break or control character.

    ``where`` is the file and the word for a position in it ("line", or "row" in a Parquet file).
    A cell that was not UTF-8 arrives with its bad bytes as lone surrogates (``surrogateescape``),
    which no decoded text holds, so failing to encode it is the check.
    """
    for value, line in zip(values, lines, strict=True):
        if not value.strip():
            return DataError(f"{where} {line}, column {id_column!r}: empty ID; give the row an ID or remove it")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return DataError(
                f"{where} {line}, column {id_column!r}: the ID is not UTF-8 text; write the file's IDs as UTF-8"
            )
        if size > MAX_ID_BYTES:
            return DataError(
                f"{where} {line}, column {id_column!r}: the ID is {size} bytes of UTF-8, over the limit of "
                f"{MAX_ID_BYTES}; shorten it (a SHA-256 hex digest of a longer key is 64 bytes)"
            )
        if "\n" in value or "\r" in value:
            return DataError(
                f"{where} {line}, column {id_column!r}: the ID contains a line break; IDs must be single-line strings"
            )
        if _CONTROL.search(value):
            # numpy's fixed-width strings drop trailing NULs, so such IDs would silently merge
            return DataError(
                f"{where} {line}, column {id_column!r}: the ID contains a control character; IDs must be printable text"
            )
    return None


#: A control character: code point below 32, or 127 (DEL). One regular-expression search per ID, not a
#: Python loop over its characters: on the digits example's party 2 file (1,527 IDs of about 40
#: characters) the loop took 9.9 ms of the exact scan's 52, the search 0.9 (2026-11-29).
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _parse_numbers(
    where: str,
    columns: Sequence[str],
    cells: list[list[str]],
    lines: list[int],
    dtype: type[np.floating],
) -> tuple[np.ndarray, DataError | None, DataError | None]:
    """(values, first non-number, first non-finite value) of one batch, in row-major order."""
    try:
        values = np.array([[float(cell) for cell in row] for row in cells], dtype=np.float64)
    except ValueError:
        return np.zeros((0, len(columns)), dtype=dtype), _non_number_error(where, columns, cells, lines), None
    with np.errstate(over="ignore"):  # overflow to inf is reported below, with its location
        converted = values.reshape(len(cells), len(columns)).astype(dtype)
    finite = np.isfinite(converted)
    if finite.all():
        return converted, None, None
    row, col = (int(i) for i in np.argwhere(~finite)[0])
    return (
        converted,
        None,
        DataError(
            f"{where} {lines[row]}, column {columns[col]!r}: value {cells[row][col]!r} is not "
            f"a finite number (NaN, inf, or too large for {np.dtype(dtype).name}); "
            "impute or drop the row before training"
        ),
    )


def _non_number_error(where: str, columns: Sequence[str], cells: list[list[str]], lines: list[int]) -> DataError:
    """Build the error for the first cell `float()` rejects; only called once conversion failed."""
    for row, line in zip(cells, lines, strict=True):
        for column, cell in zip(columns, row, strict=True):
            try:
                float(cell)
            except ValueError:
                what = "empty value" if not cell.strip() else f"value {cell!r} is not a number"
                return DataError(
                    f"{where} {line}, column {column!r}: {what}; "
                    "every feature and label value must be numeric, so fill it in or drop the row"
                )
    return DataError(f"{where.rsplit(':', 1)[0]}: a value could not be read as a number; check the numeric columns")


@dataclass(frozen=True)
class _CsvBatch:
    lines: list[int]
    rows: list[list[str]]

    def column(self, index: int) -> list[str]:
        return [row[index] for row in self.rows]


class _CsvSource:
    """A CSV's header and data rows; blank lines skipped, each row with its line number for messages."""

    unit = "line"

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise missing_file(path)
        self.path = path
        with _csv_records(path) as (_, header):
            self.header = header

    def batches(self) -> Iterator[_CsvBatch]:
        with _csv_records(self.path) as (reader, header):
            lines: list[int] = []
            rows: list[list[str]] = []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise DataError(
                        f"{self.path}: line {reader.line_num} has {len(row)} fields but the header has "
                        f"{len(header)}; fix the row (a stray comma or an unquoted comma in a value)"
                    )
                rows.append(row)
                lines.append(reader.line_num)
                if len(rows) == _BATCH_ROWS:
                    yield _CsvBatch(lines, rows)
                    lines, rows = [], []
            if rows:
                yield _CsvBatch(lines, rows)


@contextmanager
def _csv_records(path: Path) -> Iterator[tuple[Reader, list[str]]]:
    """The csv reader past the header, and the header (names stripped, checked)."""
    try:
        # utf-8-sig: spreadsheets often write a byte-order mark that would otherwise stick to
        # the first column name and make the ID column "missing".
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            first = next((row for row in reader if row), None)
            if first is None:
                raise DataError(f"{path}: file is empty; it needs a header line naming the columns")
            header = [name.strip() for name in first]
            check_header(path, header)
            yield reader, header
    except UnicodeDecodeError as exc:
        line = first_undecodable_line(path)
        raise DataError(f"{path}: not UTF-8 text at line {line} ({exc.reason}); re-save the file as UTF-8 CSV") from exc
    except csv.Error as exc:
        raise DataError(f"{path}: malformed CSV ({exc}); fix the quoting in the file") from exc


@dataclass(frozen=True)
class _ParquetBatch:
    batch: pa.RecordBatch
    lines: range

    def column(self, index: int) -> list[str]:
        values = self.batch.column(index)
        if _is_text(values.type):
            # As bytes, decoded here: Parquet text is not checked for UTF-8 when read, and bytes
            # that are not UTF-8 keep their place as lone surrogates, which ``_id_error`` refuses.
            raw = values.cast(pa.large_binary()).to_pylist()
            return ["" if v is None else v.decode("utf-8", "surrogateescape") for v in raw]
        return ["" if v is None else str(v) for v in values.to_pylist()]


def _is_text(kind: pa.DataType) -> bool:
    """Text or bytes (IDs stored without the UTF8 annotation are bytes), dictionary-encoded or not."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or str(kind) in ("string_view", "binary_view")
    )


class _ParquetSource:
    """A Parquet table's rows as strings, so they pass the CSV's checks; a position is the 1-based row."""

    unit = "row"

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise missing_file(path)
        try:
            import pyarrow.parquet as pq

            self.table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises its own error types for corrupt files
            raise DataError(f"{path}: not a readable Parquet file: {exc}") from exc
        self.header = [str(name) for name in self.table.column_names]

    def batches(self) -> Iterator[_ParquetBatch]:
        line = 1
        for batch in self.table.to_batches(max_chunksize=_BATCH_ROWS):
            yield _ParquetBatch(batch, range(line, line + batch.num_rows))
            line += batch.num_rows
