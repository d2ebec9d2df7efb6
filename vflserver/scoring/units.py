"""``vfl-score``'s units of work: one Parquet row group in, one Parquet file of scores out.

A customer base arrives as a folder of Parquet files (one file, or thousands, in subfolders or
not). The unit of work is a row group: Parquet's own unit of reading, sized by whoever wrote the
file (pyarrow's default is at most 1,048,576 rows). Both engines score the same units, so the
rows that run together are the same on either (``model``'s docstring says why that matters), and
a unit is small enough to fit one worker and large enough to keep it busy.

Each unit writes ``<output>/<its file's path, less .parquet>.<row group, 5 digits>.parquet``
holding the ID column, unchanged, and the score columns, in the input's row order; sorted by
name, the output files are the input's order. A file is written whole or not at all
(``atomic_write``), so a unit that is retried after its worker died writes the same file again.

Every check names the file and the column: a missing ID or feature column (all missing ones,
listed), a column that is not numeric, a null, and a NaN or infinite feature with its row (the
row's number in its file, from 0). No value is ever put in a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vflcore.data.checkpoints import atomic_write
from vflcore.errors import DataError

__all__ = ["ScoreUnit", "plan_units", "read_unit", "write_scores"]

#: Scores are about customers: readable by the owner and its group, as the daemons' log files are.
OUTPUT_MODE = 0o640


@dataclass(frozen=True)
class ScoreUnit:
    """One row group of one input file, and the file its scores go to."""

    source: Path
    row_group: int
    #: The row group's first row, counted from the start of its file (for error messages).
    first_row: int
    rows: int
    output: Path


def _input_files(input_path: Path) -> list[Path]:
    if input_path.is_file():
        return [input_path]
    if not input_path.is_dir():
        raise DataError(f"{input_path}: no such file or folder; pass the folder of Parquet files to score")
    files = sorted(p for p in input_path.rglob("*.parquet") if p.is_file() and not _hidden(p, input_path))
    if not files:
        raise DataError(f"{input_path}: no .parquet files in this folder (or its subfolders); nothing to score")
    return files


def _hidden(path: Path, root: Path) -> bool:
    """Files Parquet readers skip: a name (or folder) starting with '.' or '_' (e.g. ``_SUCCESS``, temp files)."""
    return any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def _check_schema(path: Path, schema: pa.Schema, id_column: str, features: tuple[str, ...]) -> None:
    names = set(schema.names)
    if id_column not in names:
        raise DataError(f"{path}: no ID column {id_column!r}; pass --id-column with the name of its ID column")
    missing = [name for name in features if name not in names]
    if missing:
        raise DataError(
            f"{path}: missing {len(missing)} of the model's {len(features)} feature columns: "
            f"{', '.join(repr(m) for m in missing)}; the model reads {', '.join(features)}"
        )
    for name in features:
        kind = schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise DataError(f"{path}: feature column {name!r} holds {kind}, not numbers; the model reads numbers")


def plan_units(input_path: Path, output: Path, id_column: str, features: tuple[str, ...]) -> list[ScoreUnit]:
    """Every non-empty row group of every Parquet file under ``input_path``, checked against the model.

    Reads only the files' footers. DataError names the file for a missing or non-numeric
    column, and the folder for an input with no rows; ``output`` must not hold files already
    (a rerun must not mix with an earlier run's output).
    """
    files = _input_files(input_path)
    root = input_path if input_path.is_dir() else input_path.parent
    _check_output(output, input_path)
    units: list[ScoreUnit] = []
    for path in files:
        try:
            metadata = pq.ParquetFile(path).metadata
        except (OSError, pa.ArrowInvalid) as exc:
            raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
        _check_schema(path, metadata.schema.to_arrow_schema(), id_column, features)
        stem = path.relative_to(root).with_suffix("")
        first = 0
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            if rows:
                target = output / stem.parent / f"{stem.name}.{group:05d}.parquet"
                units.append(ScoreUnit(path.resolve(), group, first, rows, target.resolve()))
            first += rows
    if not units:
        raise DataError(f"{input_path}: its {len(files)} Parquet file(s) hold no rows; nothing to score")
    return units


def _check_output(output: Path, input_path: Path) -> None:
    if output.exists() and not output.is_dir():
        raise DataError(f"{output}: is a file; --output names a folder for the score files")
    if output.is_dir() and any(output.iterdir()):
        raise DataError(f"{output}: this folder already holds files; pass a new or empty folder for the scores")
    resolved, source = output.resolve(), input_path.resolve()
    if resolved == source or source in resolved.parents:
        raise DataError(f"{output}: is inside the input {input_path}; write the scores somewhere else")


def read_unit(unit: ScoreUnit, id_column: str, features: tuple[str, ...]) -> tuple[pa.ChunkedArray, np.ndarray]:
    """The unit's ID column and its features as one float32 array [rows, F], in the model's order.

    DataError names the file, the column and the row of a null or of a NaN or infinite value.
    """
    table = pq.ParquetFile(unit.source).read_row_group(unit.row_group, columns=[id_column, *features])
    ids = table.column(id_column)
    if ids.null_count:
        raise DataError(f"{unit.source}: ID column {id_column!r} is empty at row {_first_null(ids, unit)}")
    matrix = np.empty((table.num_rows, len(features)), np.float32)
    for j, name in enumerate(features):
        column = table.column(name)
        if column.null_count:
            raise DataError(f"{unit.source}: feature column {name!r} is empty at row {_first_null(column, unit)}")
        matrix[:, j] = column.to_numpy()
        bad = np.flatnonzero(~np.isfinite(matrix[:, j]))
        if len(bad):
            raise DataError(
                f"{unit.source}: feature column {name!r} holds NaN or infinity (or a number too large for float32) "
                f"at row {unit.first_row + int(bad[0])}; the model needs finite values"
            )
    return ids, matrix


def _first_null(column: pa.ChunkedArray, unit: ScoreUnit) -> int:
    return unit.first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])


def write_scores(unit: ScoreUnit, id_column: str, ids: pa.ChunkedArray, scores: dict[str, np.ndarray]) -> None:
    """The unit's output file: the ID column as read, then the score columns, written atomically."""
    table = pa.table({id_column: ids, **{name: pa.array(values) for name, values in scores.items()}})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    unit.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(sink.getvalue().to_pybytes(), unit.output, mode=OUTPUT_MODE)
