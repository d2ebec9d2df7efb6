"""Settings tables, each declared once: a dataclass field says its table, key, type, default and check.

Every table a person writes is read this one way: a daemon's ``[server]``, ``[psi]``,
``[compute]``, ``[metrics]``, ``[console]``, ``[serving]`` and ``[client]``; a job's ``[job]``,
``[model]``, ``[serving]``, ``[privacy]`` and ``[distill]``; a party's own ``[privacy]``. A field
that a table sets carries ``setting(table, ...)`` in its metadata; ``read_settings`` walks the
fields and reads each with its reader, or its type's. So the dataclass is the only list of a
table's keys: ``tests/unit/test_config.py`` checks ``docs/configuration.md`` against the same
declarations, and a typo in a file is refused by name (``refuse_unknown``).

Why here, on ``vflcore``'s lowest floor: the job (``vflcore.job``), the privacy tables and the
daemons' configs all declare their fields with it, and it needs nothing but ``vflcore.errors``.
A reader's error names the file (or "job"), the table and the key, and says what to give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Any, get_type_hints

from vflcore.errors import ConfigError


class Section:
    """Typed access to one table of a document, with errors that name the file and key.

    ``source`` is the file the document came from (relative paths resolve against its folder), or
    a label for a document that has none, such as a job submitted over the Control API.
    """

    def __init__(self, doc: Mapping[str, Any], name: str, source: Path | str | None) -> None:
        raw = doc.get(name, {})
        where = f"{source}" if source else "config"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: [{name}] must be a table of settings")
        self.raw, self.name, self.where = raw, name, where
        self.base = source.parent if isinstance(source, Path) else Path.cwd()

    def wrong(self, key: str, value: Any, say: str) -> ConfigError:
        """The error for ``key = value``: the file, the table, the key, the value and ``say``."""
        return ConfigError(f"{self.where}: [{self.name}] {key} = {value!r}{say}")

    def _get(self, key: str, kind: type | tuple[type, ...], default: Any, what: str) -> Any:
        value = self.raw.get(key, default)
        # bool is an int to Python, never a count or a number to a person writing TOML
        if value is not default and (isinstance(value, bool) or not isinstance(value, kind)):
            raise self.wrong(key, value, f" has the wrong type; give {what}")
        return value

    def text(self, key: str, default: Any = None) -> Any:
        return self._get(key, str, default, "a string")

    def integer(self, key: str, default: Any = None) -> Any:
        return self._get(key, int, default, "a whole number")

    def number(self, key: str, default: Any = None) -> Any:
        value = self._get(key, (int, float), default, "a number")
        return float(value) if value is not None else None

    def integers(self, key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        value = self._get(key, list, default, "a list of whole numbers")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigError(f"{self.where}: [{self.name}] {key} must be a list of integers")
        return tuple(value)

    def path(self, key: str, default: Path | None = None) -> Path | None:
        value = self.text(key)
        if value is None:
            return default
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base / p


#: How one setting is read and checked: (its table, its key, its default) -> its value.
Reader = Callable[[Section, str, Any], Any]


def flag(sec: Section, key: str, default: bool) -> bool:
    value = sec.raw.get(key, default)
    if not isinstance(value, bool):
        raise sec.wrong(key, value, " must be true or false")
    return value


def at_least_one(sec: Section, key: str, default: int) -> int:
    """A whole number of at least 1 (a count of calls, threads, ...)."""
    value = sec.raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise sec.wrong(key, value, "; give a whole number, at least 1")
    return value


def positive(sec: Section, key: str, default: float) -> float:
    """A number of seconds that must be above zero."""
    value = float(sec.number(key, default))
    if not value > 0 or not math.isfinite(value):
        raise ConfigError(f"{sec.where}: [{sec.name}] {key} = {value:g}; give a number of seconds above 0")
    return value


def finite(sec: Section, key: str, default: float) -> float:
    """A finite number: TOML's ``inf`` and ``nan`` would pass every range check written with < and >."""
    value = sec.raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise sec.wrong(key, value, " must be a finite number")
    return float(value)


def whole(at_least: int, meaning: str) -> Reader:
    """A reader of a whole number of at least ``at_least``; ``meaning`` says what it counts, for the error."""

    def read(sec: Section, key: str, default: int) -> int:
        value = sec.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < at_least:
            raise sec.wrong(key, value, f"; give {meaning}")
        return value

    return read


def one_of(choices: Iterable[str]) -> Reader:
    """A reader of a string that must be one of ``choices``."""
    allowed = tuple(choices)

    def read(sec: Section, key: str, default: str) -> str:
        value: str = sec.text(key, default)
        if value not in allowed:
            raise sec.wrong(key, value, f"; choose one of {list(allowed)}")
        return value

    return read


def optional_finite(sec: Section, key: str, default: float | None) -> float | None:
    """A finite number, or None where the table leaves the key out (a setting that follows another's)."""
    if key not in sec.raw and default is None:
        return None
    return finite(sec, key, 0.0 if default is None else default)


#: The reader of a setting that declares none, by the field's type.
_BY_TYPE: dict[Any, Reader] = {
    str: lambda sec, key, default: sec.text(key, default),
    str | None: lambda sec, key, default: sec.text(key, default),
    int: lambda sec, key, default: sec.integer(key, default),
    float: finite,
    float | None: optional_finite,
    bool: flag,
    tuple[int, ...]: lambda sec, key, default: sec.integers(key, default),
    Path: lambda sec, key, default: sec.path(key, default),
    Path | None: lambda sec, key, default: sec.path(key, default),
}


def setting(table: str, *, key: str = "", read: Reader | None = None, unset: str = "") -> dict[str, Any]:
    """A settings field's metadata: its table and key (default: the field's name), and its reader.

    ``read`` defaults to the field type's reader. ``unset`` says what a default of None means, in
    the words of ``docs/configuration.md``.
    """
    return {"table": table, "key": key, "read": read, "unset": unset}


def setting_key(spec: Field[Any]) -> tuple[str, str]:
    """A declared field's table and key in the file."""
    return spec.metadata["table"], spec.metadata["key"] or spec.name


def declared(cls: type, table: str | None = None) -> tuple[Field[Any], ...]:
    """The fields of ``cls`` that a table sets (of ``table`` only, if given)."""
    found = (f for f in fields(cls) if "table" in f.metadata)
    return tuple(f for f in found if table is None or f.metadata["table"] == table)


def table_keys(cls: type, table: str) -> tuple[str, ...]:
    """Every key of ``table`` that ``cls`` declares."""
    return tuple(setting_key(f)[1] for f in declared(cls, table))


def default_of(spec: Field[Any]) -> Any:
    """A field's default value ("" for a field without one, such as ``JobSpec.job_id``)."""
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return ""


def read_settings(
    cls: type, doc: Mapping[str, Any], source: Path | str | None, *, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every declared field of ``cls``, read from its table by its reader: field name -> value.

    ``defaults`` replaces the declared default of some fields by the caller's (a job's
    ``join_timeout_s`` defaults to the server's own). Fields no table sets are left to the caller.
    """
    types = get_type_hints(cls)
    values: dict[str, Any] = {}
    for spec in declared(cls):
        table, key = setting_key(spec)
        read = spec.metadata["read"] or _BY_TYPE[types[spec.name]]
        default = (defaults or {}).get(spec.name, default_of(spec))
        values[spec.name] = read(Section(doc, table, source), key, default)
    return values


def refuse_unknown(sec: Section, known: Iterable[str], *, what: str = "") -> None:
    """ConfigError naming the first key of ``sec`` not in ``known``, and the keys it may hold.

    ``what`` adds where such a key belongs instead (a job's setting written in a daemon's config).
    """
    keys = sorted(known)
    unknown = sorted(set(sec.raw) - set(keys))
    if unknown:
        raise ConfigError(f"{sec.where}: [{sec.name}] has no key {unknown[0]!r}; the keys are {keys}{what}")


__all__ = [
    "Reader",
    "Section",
    "at_least_one",
    "declared",
    "default_of",
    "finite",
    "flag",
    "one_of",
    "positive",
    "read_settings",
    "refuse_unknown",
    "setting",
    "setting_key",
    "table_keys",
    "whole",
]
