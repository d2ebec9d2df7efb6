"""Settings tables, each declared once: a dataclass field says its table, key, type, default and check.

Every table a person writes is read this one way: a daemon's ``[server]``, ``[psi]``,
``[compute]``, ``[metrics]``, ``[console]``, ``[serving]`` and ``[client]``; a job's ``[job]``,
``[model]``, ``[serving]``, ``[privacy]`` and ``[distill]``; a party's own ``[privacy]``. A field
that a table sets carries ``setting(table, ...)`` in its metadata; ``read_settings`` walks the
fields and reads each with its reader, or its type's. So the dataclass is the only list of a
table's keys: ``tests/unit/vflcore/runtime/test_config.py`` checks ``docs/reference/configuration.md`` against the same
declarations, and a typo in any table of a file is refused by name (``refuse_unknown_tables``).
A field's ``check`` holds its rule, so an object built in code is refused as its file would be
(``check_declared``, from each settings class's ``__post_init__``).

Why here, on ``vflcore``'s lowest floor: the job (``vflcore.job``), the privacy tables and the
daemons' configs all declare their fields with it, and it needs nothing but ``vflcore.errors``.
A reader's error names the file (or "job"), the table and the key, and says what to give.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, fields
from pathlib import Path
from types import MappingProxyType
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
        return ConfigError(f"{self.where}: [{self.name}] {key} = {shown(value)}{say}")

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


#: How one setting is read: (its table, its key, its default) -> its value, of the field's type.
Reader = Callable[[Section, str, Any], Any]
#: A setting's rule on its value, whoever built it: None if the value is fine, else the error's tail
#: after ``[table] key = value`` (such as "; give a whole number, at least 1"), which says what to give.
#: A check refuses a value of the wrong type too, since an object built in code has no reader. The
#: ready-made ones below (``whole``, ``positive``, ``above``, ``at_least``, ``within``, ``one_of``,
#: ``optional``) are the rules the settings tables share.
Check = Callable[[Any], str | None]


def flag(sec: Section, key: str, default: bool) -> bool:
    value = sec.raw.get(key, default)
    if not isinstance(value, bool):
        raise sec.wrong(key, value, " must be true or false")
    return value


def finite(sec: Section, key: str, default: float) -> float:
    """A finite number: TOML's ``inf`` and ``nan`` would pass every range check written with < and >."""
    value = sec.raw.get(key, default)
    if not _is_number(value) or not math.isfinite(value):
        raise sec.wrong(key, value, " must be a finite number")
    return float(value)


def optional_finite(sec: Section, key: str, default: float | None) -> float | None:
    """A finite number, or None where the table leaves the key out (a setting that follows another's)."""
    if key not in sec.raw and default is None:
        return None
    return finite(sec, key, 0.0 if default is None else default)


def _is_number(value: Any) -> bool:
    """An int or a float; bool is an int to Python, never a number to a person writing TOML."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_whole(value: Any) -> bool:
    """An int, and not a bool: ``true`` is no count."""
    return isinstance(value, int) and not isinstance(value, bool)


def whole(least: int, meaning: str) -> Check:
    """A whole number of at least ``least``; ``meaning`` says what to give, for the error."""
    return lambda value: None if _is_whole(value) and value >= least else f"; give {meaning}"


#: A count of calls, threads, IDs ...: a whole number of at least 1.
at_least_one = whole(1, "a whole number, at least 1")


def positive(value: Any) -> str | None:
    """A number of seconds that must be above zero (and finite)."""
    good = _is_number(value) and math.isfinite(value) and value > 0
    return None if good else "; give a number of seconds above 0"


def above(floor: float, say: str) -> Check:
    """A number above ``floor``; ``say`` is what to give instead."""
    return lambda value: None if _is_number(value) and value > floor else f"; {say}"


def at_least(floor: float, say: str) -> Check:
    """A number of at least ``floor``; ``say`` is what to give instead."""
    return lambda value: None if _is_number(value) and value >= floor else f"; {say}"


def within(low: float, high: float, say: str, *, low_included: bool = True, high_included: bool = False) -> Check:
    """A number in [low, high), or with either end in or out as said; ``say`` is what to give instead."""

    def check(value: Any) -> str | None:
        above_low = _is_number(value) and (low <= value if low_included else low < value)
        inside = above_low and (value <= high if high_included else value < high)
        return None if inside else f"; {say}"

    return check


def one_of(choices: Iterable[str]) -> Check:
    """A string that must be one of ``choices``."""
    allowed = tuple(choices)
    return lambda value: None if value in allowed else f"; choose one of {list(allowed)}"


def optional(check: Check) -> Check:
    """``check``, for a setting whose None means "as another setting" (and passes)."""
    return lambda value: None if value is None else check(value)


#: The reader of a setting that declares none, by the field's type.
_BY_TYPE: dict[Any, Reader] = {
    str: lambda sec, key, default: sec.text(key, default),
    str | None: lambda sec, key, default: sec.text(key, default),
    int: lambda sec, key, default: sec.integer(key, default),
    int | None: lambda sec, key, default: sec.integer(key, default),
    float: finite,
    float | None: optional_finite,
    bool: flag,
    tuple[int, ...]: lambda sec, key, default: sec.integers(key, default),
    Path: lambda sec, key, default: sec.path(key, default),
    Path | None: lambda sec, key, default: sec.path(key, default),
}


#: The table of a setting declared once for several settings classes that each read it from a table of
#: their own: a daemon's ``run_dir`` is ``[server] run_dir`` in the server's config and ``[client]
#: run_dir`` in a party's (``vflcore.runtime.config.PartySettings``). Each class that inherits such a
#: field names its table in a class attribute, ``own_table``; ``declared`` puts the field there.
OWN_TABLE = "<own table>"


def setting(
    table: str, *, key: str = "", read: Reader | None = None, check: Check | None = None, unset: str = ""
) -> dict[str, Any]:
    """A settings field's metadata: its table and key (default: the field's name), its reader and its check.

    ``read`` defaults to the field type's reader; it reads the type, and ``check`` holds the rule on
    the value, so the rule runs for a value read from a file and for one given in code alike
    (``check_declared``). ``unset`` says what a default of None means, in the words of
    ``docs/reference/configuration.md``.
    """
    return {"table": table, "key": key, "read": read, "check": check, "unset": unset}


def setting_key(spec: Field[Any]) -> tuple[str, str]:
    """A declared field's table and key in the file."""
    return spec.metadata["table"], spec.metadata["key"] or spec.name


def declared(cls: type, table: str | None = None) -> tuple[Field[Any], ...]:
    """The fields of ``cls`` that a table sets (of ``table`` only, if given), each in its table for ``cls``."""
    return tuple(f for f in _declared(cls) if table is None or f.metadata["table"] == table)


@functools.cache
def _declared(cls: type) -> tuple[Field[Any], ...]:
    """Once per class: every settings object's ``__post_init__`` asks (``check_declared``)."""
    return tuple(_in_table_of(cls, f) for f in fields(cls) if "table" in f.metadata)


def _in_table_of(cls: type, spec: Field[Any]) -> Field[Any]:
    """``spec`` as ``cls`` reads it: a field declared in ``OWN_TABLE`` is put in the table ``cls`` names."""
    if spec.metadata["table"] != OWN_TABLE:
        return spec
    own = getattr(cls, "own_table", None)
    if not isinstance(own, str):
        raise TypeError(f"{cls.__name__}: setting {spec.name!r} is in the class's own table; name it in own_table")
    placed = copy.copy(spec)
    placed.metadata = MappingProxyType({**spec.metadata, "table": own})
    return placed


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
    """Every declared field of ``cls``, read from its table by its reader and checked: field name -> value.

    ``defaults`` replaces the declared default of some fields by the caller's (a job's
    ``join_timeout_s`` defaults to the server's own). Fields no table sets are left to the caller.
    """
    types = get_type_hints(cls)
    values: dict[str, Any] = {}
    for spec in declared(cls):
        table, key = setting_key(spec)
        read = spec.metadata["read"] or _BY_TYPE[types[spec.name]]
        default = (defaults or {}).get(spec.name, default_of(spec))
        sec = Section(doc, table, source)
        if key in sec.raw:  # the rule first: it says what to give, where a reader would only name the type
            _refuse_unless_fine(spec, sec.raw[key], sec.where)
        values[spec.name] = value = read(sec, key, default)
        _refuse_unless_fine(spec, value, sec.where)
    return values


def check_declared(obj: Any, where: str | None = None) -> None:
    """Run every declared field's check on a built settings object; ConfigError as a file's, naming ``where``.

    Each settings dataclass calls it in ``__post_init__``, so an object built in code meets the same
    rules, in the same words, as one read from a file (``where``: its class name by default).
    """
    for spec in declared(type(obj)):
        _refuse_unless_fine(spec, getattr(obj, spec.name), where or type(obj).__name__)


def _refuse_unless_fine(spec: Field[Any], value: Any, where: str) -> None:
    check: Check | None = spec.metadata["check"]
    tail = check(value) if check is not None else None
    if tail is not None:
        table, key = setting_key(spec)
        raise ConfigError(f"{where}: [{table}] {key} = {shown(value)}{tail}")


def shown(value: Any) -> str:
    """A value as an error shows it: as TOML would write it, so 300 and 300.0 read the same."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return repr(list(value))
    return repr(value)


def refuse_unknown(sec: Section, known: Iterable[str], *, what: str = "") -> None:
    """ConfigError naming the first key of ``sec`` not in ``known``, and the keys it may hold.

    ``what`` adds where such a key belongs instead (a job's setting written in a daemon's config).
    """
    keys = sorted(known)
    unknown = sorted(set(sec.raw) - set(keys))
    if unknown:
        raise ConfigError(f"{sec.where}: [{sec.name}] has no key {unknown[0]!r}; the keys are {keys}{what}")


#: What a document may hold: each table's keys, or None for a table another reader checks entry by
#: entry (free names, as ``[datasets]`` and ``[algorithm]``, or a job's tables in a daemon's config).
Tables = Mapping[str, Iterable[str] | None]


def refuse_unknown_tables(
    doc: Mapping[str, Any], source: Path | str | None, tables: Tables, *, hints: Mapping[str, str] | None = None
) -> None:
    """ConfigError for a table ``tables`` lacks, or a key a known table lacks, naming it and listing the known ones.

    Each document is checked whole by its one reader, before any value is read: a typo is refused
    in every table, not only in those whose reader remembered to look. ``hints`` adds, per table,
    where a key refused there belongs instead.
    """
    where = f"{source}" if source else "config"
    unknown = sorted(set(doc) - set(tables))
    if unknown:
        raise ConfigError(f"{where}: [{unknown[0]}] is not a table of this file; the tables are {sorted(tables)}")
    for name, keys in tables.items():
        if keys is not None and name in doc:
            refuse_unknown(Section(doc, name, source), keys, what=(hints or {}).get(name, ""))


def tables_of(*classes: type) -> dict[str, tuple[str, ...]]:
    """Every table the settings ``classes`` declare, with its keys: the known part of a document."""
    found: dict[str, tuple[str, ...]] = {}
    for cls in classes:
        for spec in declared(cls):
            table, key = setting_key(spec)
            found[table] = (*found.get(table, ()), key)
    return found


__all__ = [
    "OWN_TABLE",
    "Check",
    "Reader",
    "Section",
    "Tables",
    "above",
    "at_least",
    "at_least_one",
    "check_declared",
    "declared",
    "default_of",
    "finite",
    "flag",
    "one_of",
    "optional",
    "positive",
    "read_settings",
    "refuse_unknown",
    "refuse_unknown_tables",
    "setting",
    "setting_key",
    "table_keys",
    "tables_of",
    "whole",
    "within",
]
