"""Which columns of a party's table are its ID, its label and its features, with the header's checks.

Both readers (``vflcore.data.columnar`` and ``vflcore.data.exact_scan``) resolve a header through
this module, so a misnamed column gets one message whichever reader met it: the file, the
wanted column and the columns that were found.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vflcore.errors import DataError

PARQUET_SUFFIXES = (".parquet", ".pq")


def is_parquet(path: Path) -> bool:
    """A ``.parquet``/``.pq`` file is read as Parquet; anything else as CSV."""
    return path.suffix.lower() in PARQUET_SUFFIXES


def missing_file(path: Path) -> DataError:
    return DataError(f"{path}: file not found; check the path in the party's data setting")


@dataclass(frozen=True)
class TableColumns:
    """Positions in the header of the ID column, the label column (or None) and the feature columns."""

    id_index: int
    label_index: int | None
    feature_names: tuple[str, ...]
    feature_indices: tuple[int, ...]


def check_header(path: Path, header: list[str]) -> None:
    """Reject blank or repeated column names, which would make column lookup ambiguous."""
    if any(name == "" for name in header):
        raise DataError(f"{path}: the header has an empty column name; give every column a name")
    repeated = sorted(name for name, count in Counter(header).items() if count > 1)
    if repeated:
        raise DataError(f"{path}: column names appear more than once: {repeated}; rename them")


def resolve_columns(
    path: Path,
    header: list[str],
    *,
    id_column: str,
    label_column: str | None,
    feature_columns: Sequence[str] | None,
) -> TableColumns:
    """The ID, label and feature columns; features default to every column but the ID and label."""
    id_index = _column_index(path, header, id_column, role="ID")
    label_index = None if label_column is None else _column_index(path, header, label_column, role="label")
    names = _feature_names(path, header, id_column, label_column, feature_columns)
    return TableColumns(id_index, label_index, tuple(names), tuple(header.index(name) for name in names))


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
