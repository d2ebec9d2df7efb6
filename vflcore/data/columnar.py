"""The columnar reader: a party's CSV or Parquet table straight into one float32 array, with pyarrow.

At 1M rows x 30 features the row-by-row reader built 31M Python objects (30 s, 4.2 GB); here
pyarrow parses the file in C++ and numpy fills one preallocated float32 (n, d) array, a piece
at a time, so the peak is about the final arrays plus one piece. The IDs become a StringDType
array through NUL-padded UTF-8 (``vflcore.data.id_arrays``), with no Python object per row.

This reader vouches only for what it can check in whole columns: every cell parsed, no null,
every ID valid UTF-8 of 1 to 256 bytes, not whitespace alone, with no control character or line
break, every feature and label finite. Anything else (a bad cell, a wrong field count, a decode error, a number Python
reads and Arrow does not) makes it refuse, and ``vflcore.data.exact_scan`` reads the file again
to give the old message, with its line. The numbers are the ones the row-by-row reader gave,
bit for bit: each value is parsed to the nearest float64 (Arrow and Python both round
correctly), then rounded once to float32, as ``float(cell)`` then ``astype(float32)`` did.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vflcore.data.columns import TableColumns, check_header, is_parquet, missing_file, resolve_columns
from vflcore.data.csv_lines import data_row_lines
from vflcore.data.exact_scan import TableArrays
from vflcore.data.id_arrays import MAX_ID_BYTES, find_repeats, string_column, utf8_chunks
from vflcore.data.repeats import warn_repeats
from vflcore.errors import DataError
from vflcore.memory import return_freed_memory

#: CSV bytes per pyarrow call. pyarrow parses a piece on every core; one piece of float64
#: columns (about 3x its bytes) and the parser's buffers are the most this reader holds beside the
#: final arrays. 8 MB pieces held 40 MB less than 16 MB ones at 1M rows, at the same speed.
_PIECE_BYTES = 8 << 20
#: Parquet rows per batch. Arrow's reader holds a few MB per column it decodes whatever the file's
#: size (buffers, pages, dictionaries); smaller batches and read buffers kept that near 0.15 GB
#: for 31 columns, where pre-buffering whole row groups held 0.35 GB, at the same speed; reading
#: a few columns per pass (``_passes``) keeps it near 0.05 GB.
_PARQUET_BATCH_ROWS = 1 << 15
_PARQUET_READ_BUFFER = 1 << 18
#: Feature columns per pass over a Parquet file (``_passes``).
_PARQUET_COLUMNS_PER_PASS = 4
#: Rows per block where a whole-array pass would make a temporary as large as the array.
_BLOCK_ROWS = 1 << 18


@dataclass(frozen=True)
class _Columns:
    """Every row as read: the table's columns before the ID checks and repeated IDs are dealt with."""

    ids: pa.ChunkedArray
    features: np.ndarray
    labels: np.ndarray | None
    feature_names: tuple[str, ...]
    lines_of: Callable[[np.ndarray], list[int]]


def read_columnar(
    path: Path, *, id_column: str, label_column: str | None, feature_columns: Sequence[str] | None
) -> TableArrays | None:
    """The table's arrays, or None when this reader cannot vouch for the file (the exact scan decides).

    Raises `DataError` itself only for a missing file and, once every row of a CSV has parsed, for
    a column the header lacks: the most common mistake gets its answer without a second read.
    """
    if not path.is_file():
        raise missing_file(path)
    read = _read_parquet if is_parquet(path) else _read_csv
    try:
        columns = read(path, id_column=id_column, label_column=label_column, feature_columns=feature_columns)
        return None if columns is None else _finish(path, id_column, columns)
    finally:
        # Arrow's allocator keeps freed pages for its next allocation; the arrays that follow
        # (numpy's, torch's) come from malloc, so hand them back: 0.3 GB after a 10M-row table.
        pa.default_memory_pool().release_unused()
        return_freed_memory()  # numpy's own pieces and temporaries, freed, likewise


def _finish(path: Path, id_column: str, columns: _Columns) -> TableArrays | None:
    """Check the IDs, drop repeated IDs' later rows, check every number; then the StringDType IDs."""
    if not _ids_are_clean(columns.ids):
        return None
    ids, features, labels = columns.ids, columns.features, columns.labels
    repeats = find_repeats(ids)
    if repeats is not None:
        ids = ids.take(pa.array(repeats.keep))
        features = keep_rows(features, repeats.keep)
        labels = None if labels is None else keep_rows(labels, repeats.keep)
    if not _all_finite(features) or (labels is not None and not _all_finite(labels)):
        return None
    if repeats is not None:  # only now: for a refused file, the exact scan warns
        warn_repeats(path, id_column, repeats, columns.lines_of)
    return TableArrays(string_column(ids), features, columns.feature_names, labels)


def _ids_are_clean(ids: pa.ChunkedArray) -> bool:
    """Valid UTF-8 of 1 to ``MAX_ID_BYTES`` bytes, not whitespace alone, no control character (nor line break).

    The CSV parser checks UTF-8 itself; a Parquet file's strings are not checked when read, and
    numpy must never decode invalid UTF-8 (numpy#32288), so every chunk is validated here.
    """
    for chunk in ids.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            return False
        lengths = pc.binary_length(chunk)
        if len(chunk) and not 0 < pc.min(lengths).as_py() <= pc.max(lengths).as_py() <= MAX_ID_BYTES:
            return False
        if pc.any(pc.utf8_is_space(chunk)).as_py():
            return False
    # UTF-8 never uses bytes below 0x80 inside a multi-byte character: a byte check is a character check
    return not any(len(data) and (int(data.min()) < 32 or np.count_nonzero(data == 127)) for data in utf8_chunks(ids))


def keep_rows(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The rows ``keep`` (ascending), moved to the front in place a block at a time: no second copy.

    A kept row never moves down (``keep[i] >= i``), so no block overwrites a row a later block reads.
    """
    for start in range(0, len(keep), _BLOCK_ROWS):
        rows = keep[start : start + _BLOCK_ROWS]
        values[start : start + len(rows)] = values[rows]
    return values[: len(keep)]


def _all_finite(values: np.ndarray) -> bool:
    return all(np.isfinite(values[start : start + _BLOCK_ROWS]).all() for start in range(0, len(values), _BLOCK_ROWS))


def _read_parquet(
    path: Path, *, id_column: str, label_column: str | None, feature_columns: Sequence[str] | None
) -> _Columns | None:
    """Fill the arrays batch by batch; the row count is in the file's footer, so they are sized once."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=_PARQUET_READ_BUFFER)
        schema = parquet.schema_arrow
        rows = parquet.metadata.num_rows
    except Exception:  # pyarrow raises its own error types for corrupt files; the exact scan words them
        return None
    header = [str(name) for name in schema.names]
    if len(set(header)) != len(header) or rows == 0:
        return None
    try:
        columns = resolve_columns(
            path, header, id_column=id_column, label_column=label_column, feature_columns=feature_columns
        )
    except DataError:
        return None  # the exact scan reads the whole file first, as the old reader did, then names the column
    id_type = schema.field(columns.id_index).type
    if pa.types.is_dictionary(id_type):  # e.g. a pandas categorical: decoded as text below
        id_type = id_type.value_type
    # IDs stored as bytes (Parquet BYTE_ARRAY without the UTF8 annotation) are read as UTF-8 text;
    # the cast in ``fill`` refuses bytes that are not, and the exact scan names the row.
    numeric = [*([] if columns.label_index is None else [columns.label_index]), *columns.feature_indices]
    if not (_is_string(id_type) or pa.types.is_integer(id_type)) or not all(
        _is_number(schema.field(i).type) for i in numeric
    ):
        return None  # e.g. booleans, decimals, dates: the exact scan reads them as text, as before
    target = _Targets(columns, rows)
    try:
        for part in _passes(columns):
            start = 0
            for batch in parquet.iter_batches(
                batch_size=_PARQUET_BATCH_ROWS, columns=[header[i] for i in part.indices(columns)], use_threads=True
            ):
                if not target.fill(part, _by_name(batch, header), start, batch.num_rows):
                    return None
                start += batch.num_rows
            if start != rows:
                return None  # the footer's row count and the pages disagree: a damaged file
    except Exception:  # a corrupt page: the exact scan reads the file again and words the error
        return None
    target.filled(rows)
    return target.columns(lambda positions: (positions + 1).tolist())


@dataclass(frozen=True)
class _Pass:
    """Some of a table's columns, read together: the ID and label, or a few features (by position)."""

    with_ids: bool
    with_label: bool
    features: range

    def indices(self, columns: TableColumns) -> list[int]:
        """The pass's columns by their position in the file's header."""
        ids = [columns.id_index] if self.with_ids else []
        label = [columns.label_index] if self.with_label and columns.label_index is not None else []
        return [*ids, *label, *(columns.feature_indices[j] for j in self.features)]


def _passes(columns: TableColumns) -> list[_Pass]:
    """The ID and label columns first, then the features ``_PARQUET_COLUMNS_PER_PASS`` at a time.

    Arrow's reader holds a few MB for each column it is decoding, whatever the batch size; a pass
    over a few columns at a time keeps that near 0.05 GB where all 31 at once held 0.17 GB (at 1M
    rows that was the difference between 1.17x and under 1x the memory target), at the same speed.
    """
    passes = [_Pass(True, columns.label_index is not None, range(0))]
    count = len(columns.feature_indices)
    for start in range(0, count, _PARQUET_COLUMNS_PER_PASS):
        passes.append(_Pass(False, False, range(start, min(start + _PARQUET_COLUMNS_PER_PASS, count))))
    return passes


def _by_name(batch: pa.RecordBatch, header: list[str]) -> Callable[[int], pa.Array]:
    """A batch's column by its position in the file's header (a batch holds only the columns read)."""
    return lambda index: batch.column(header[index])


def _read_csv(
    path: Path, *, id_column: str, label_column: str | None, feature_columns: Sequence[str] | None
) -> _Columns | None:
    """Parse the CSV a piece at a time (whole lines), each piece on every core, into the arrays."""
    import pyarrow.csv as pcsv

    raw_header = _csv_header(path)
    if raw_header is None:
        return None
    header = [name.strip() for name in raw_header]
    try:
        check_header(path, header)
    except DataError:
        return None
    columns: TableColumns | None = None
    unresolved: DataError | None = None
    try:
        columns = resolve_columns(
            path, header, id_column=id_column, label_column=label_column, feature_columns=feature_columns
        )
    except DataError as exc:  # raised once every row has parsed, which is where the old reader raised it
        unresolved = exc
    numeric = set() if columns is None else {*columns.feature_indices}
    if columns is not None and columns.label_index is not None:
        numeric.add(columns.label_index)
    types = {raw: (pa.float64() if i in numeric else pa.string()) for i, raw in enumerate(raw_header)}
    convert = pcsv.ConvertOptions(
        column_types=types, null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=True
    )
    field_limit = csv.field_size_limit()
    target = _Targets(columns, None) if columns is not None else None
    file_bytes = path.stat().st_size
    rows = 0
    try:
        for number, piece in enumerate(_csv_pieces(path)):
            read = pcsv.ReadOptions(column_names=None if number == 0 else raw_header, use_threads=True)
            table = pcsv.read_csv(pa.BufferReader(pa.py_buffer(piece)), read_options=read, convert_options=convert)
            if table.column_names != raw_header or not _text_columns_fit(table, numeric, columns, field_limit):
                return None
            if target is not None:
                if number == 0:  # rows per byte of the first piece, with 5 % to spare
                    target.reserve(int(table.num_rows * file_bytes / max(len(piece), 1) * 1.05) + 1024)
                if not target.add(table.column, table.num_rows):
                    return None
            rows += table.num_rows
    except (pa.ArrowException, UnicodeError):  # a field count, a bad number, bytes that are not UTF-8
        return None
    if rows == 0:
        return None
    if unresolved is not None:
        raise unresolved
    assert target is not None
    return target.columns(lambda positions: data_row_lines(path, positions))


def _csv_header(path: Path) -> list[str] | None:
    """The header's raw names, read as the exact scan reads them; None if that fails."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return next((row for row in csv.reader(handle) if row), None)
    except (UnicodeDecodeError, csv.Error):
        return None


def _csv_pieces(path: Path) -> Iterator[memoryview]:
    """The file in pieces of about ``_PIECE_BYTES`` that end at a line feed.

    A quoted value with a line feed may be cut, but such a value makes the reader refuse anyway
    (it reaches an ID, a number or a text column's line-break check).
    """
    with path.open("rb") as handle:
        rest = b""
        while block := handle.read(_PIECE_BYTES):
            if rest:
                block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            yield memoryview(block)[:cut]
            rest = block[cut:]
        if rest:
            yield memoryview(rest)


def _text_columns_fit(table: pa.Table, numeric: set[int], columns: TableColumns | None, field_limit: int) -> bool:
    """No field longer than the csv module's limit, and no line break in a column read as text.

    The first was the old reader's "malformed CSV"; the second would shift the line numbers
    ``data_row_lines`` finds (in an ID it is an error, which ``_ids_are_clean`` finds too).
    """
    for index, column in enumerate(table.columns):
        if index in numeric or len(column) == 0:
            continue
        longest = pc.max(pc.binary_length(column)).as_py()
        if longest is not None and longest > field_limit:
            return False
        is_id = columns is not None and index == columns.id_index
        if not is_id and pc.any(pc.match_substring_regex(column, "[\r\n]")).as_py():
            return False
    return True


class _Targets:
    """The arrays a reader fills: IDs as Arrow chunks, float32 features and float64 labels by row.

    With the row count unknown (CSV), ``reserve`` sizes the arrays from the first piece's rows
    per byte; they grow (a copy) only if the file's later rows are shorter. Pages past the last
    row are never touched, so a generous estimate costs address space, not memory.
    """

    def __init__(self, columns: TableColumns, rows: int | None) -> None:
        self._columns = columns
        self._rows = rows
        self._id_chunks: list[pa.Array] = []
        self._features = np.empty((rows or 0, len(columns.feature_indices)), dtype=np.float32)
        self._labels = None if columns.label_index is None else np.empty(rows or 0, dtype=np.float64)
        self._filled = 0
        #: Every column at once: what ``add`` fills.
        self._every = _Pass(True, columns.label_index is not None, range(len(columns.feature_indices)))

    def add(self, column: Callable[[int], pa.Array | pa.ChunkedArray], count: int) -> bool:
        """Append ``count`` rows (``column`` gives a piece's column by header position); False to refuse."""
        if self._filled + count > len(self._features):
            if self._rows is not None:
                return False  # more rows than the footer said: a damaged file
            self.reserve(max(self._filled + count, 2 * len(self._features)))
        if not self.fill(self._every, column, self._filled, count):
            return False
        self._filled += count
        return True

    def fill(self, part: _Pass, column: Callable[[int], pa.Array | pa.ChunkedArray], start: int, count: int) -> bool:
        """Rows ``start`` to ``start + count`` of the columns of ``part``; False to refuse (a null, too many rows)."""
        columns = self._columns
        if start + count > len(self._features):
            return False  # more rows than the footer said: a damaged file
        ids = column(columns.id_index) if part.with_ids else None
        label = column(columns.label_index) if part.with_label and columns.label_index is not None else None
        features = [column(columns.feature_indices[j]) for j in part.features]
        if any(values is not None and values.null_count for values in (ids, label, *features)):
            return False
        if ids is not None:
            # One string type for every chunk; a Parquet integer ID becomes its decimal string, as before.
            ids = ids.cast(pa.large_string())
            self._id_chunks.extend(ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids])
        rows = slice(start, start + count)
        with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, which _finish refuses
            for j, values in zip(part.features, features, strict=True):
                self._features[rows, j] = _float64(values)
        if label is not None and self._labels is not None:
            self._labels[rows] = _float64(label)
        return True

    def filled(self, rows: int) -> None:
        """Every column's first ``rows`` rows are in: what a reader that fills by column says at its end."""
        self._filled = rows

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` rows, keeping those filled."""
        if capacity <= len(self._features):
            return
        self._features = _grown(self._features, capacity, self._filled)
        if self._labels is not None:
            self._labels = _grown(self._labels, capacity, self._filled)

    def columns(self, lines_of: Callable[[np.ndarray], list[int]]) -> _Columns | None:
        """The filled rows (views: the spare capacity is never copied); None if a footer's count was wrong."""
        if self._rows is not None and self._filled != self._rows:
            return None  # the footer's row count and the pages disagree: a damaged file
        features = self._features[: self._filled]
        labels = None if self._labels is None else self._labels[: self._filled]
        ids = pa.chunked_array(self._id_chunks, type=pa.large_string())
        return _Columns(ids, features, labels, self._columns.feature_names, lines_of)


def _grown(values: np.ndarray, capacity: int, filled: int) -> np.ndarray:
    grown = np.empty((capacity, *values.shape[1:]), dtype=values.dtype)
    grown[:filled] = values[:filled]
    return grown


def _float64(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric column's values, ready to assign: integers through float64, so each rounds once to
    float64 and then to float32, as ``float(str(v))`` then ``astype(float32)`` did."""
    values: np.ndarray = column.to_numpy()
    return values if values.dtype.kind == "f" else values.astype(np.float64)


def _is_string(kind: pa.DataType) -> bool:
    """Text or bytes (taken as UTF-8 text); the view types where this pyarrow has them (>= 16)."""
    views = [getattr(pa, name)() for name in ("string_view", "binary_view") if hasattr(pa, name)]
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or kind in views
    )


def _is_number(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or kind in (pa.float32(), pa.float64()))
