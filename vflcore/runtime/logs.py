"""Configure structured logging once per daemon, and show progress bars only to a human.

A daemon calls `configure_logging()` at its entry point. Output is JSON lines when the log stream
(stderr for the daemons) is not a terminal, so log collectors get one parsable object per event,
and coloured console lines when it is. Values bound with
`structlog.contextvars.bind_contextvars(party=..., round=...)` appear in every event, which is
how one party's log lines stay attributable. Records from stdlib `logging` (third-party
libraries) are rendered the same way.

Libraries log through stdlib `logging` only (every event of ours goes through structlog), and
their debug records are noise to an operator who asked for ours: at `--log-level debug` a
server's file was mostly grpc's "Loaded running loop" (2,160 lines in one run) and matplotlib's
font search. So stdlib records below INFO are dropped unless the environment variable
`VFL_LIBRARY_LOG_LEVEL` (debug, info, ...) asks for them; it cannot let through what
`--log-level` holds back.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO, TypeVar

import structlog
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

__all__ = ["LEVELS", "LIBRARY_LEVEL_ENV", "configure_logging", "get_logger", "progress", "progress_callback"]

LEVELS = ("debug", "info", "warning", "error", "critical")

#: The environment variable that sets the lowest level of third-party (stdlib) records; default info.
LIBRARY_LEVEL_ENV = "VFL_LIBRARY_LOG_LEVEL"

T = TypeVar("T")


class _VflHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the stdlib handler we install, so reconfiguring replaces it and leaves others alone."""


class _NamedPrintLogger(structlog.PrintLogger):
    """A PrintLogger that remembers the name given to `get_logger`, for the `logger` field."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class _NamedPrintLoggerFactory:
    """Like structlog's PrintLoggerFactory, but keeps `get_logger`'s name on the logger."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: Any) -> _NamedPrintLogger:
        return _NamedPrintLogger(self._file, str(args[0]) if args else "")


#: Exceptions as structured data without each frame's locals: a frame's locals hold tensors, IDs
#: and feature values, which no log line may carry (structlog's ready-made dict-traceback
#: processor shows them).
_TRACEBACKS = structlog.processors.ExceptionRenderer(structlog.tracebacks.ExceptionDictTransformer(show_locals=False))


def _add_logger_name(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """Add `logger=<name>` for our own events; stdlib records get theirs from add_logger_name."""
    name = getattr(logger, "name", "")
    if name:
        event_dict.setdefault("logger", name)
    return event_dict


def configure_logging(*, json: bool | None = None, level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog (and stdlib logging) for this process; call once at a daemon's entry point.

    json=None chooses by whether stdout is a terminal; `stream` defaults to stdout and exists
    mainly so tests can capture output.
    """
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; choose one of {', '.join(LEVELS)}")
    level_number = logging.getLevelNamesMapping()[level.upper()]
    out = sys.stdout if stream is None else stream
    use_json = not out.isatty() if json is None else json

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor
    if use_json:
        renderer = structlog.processors.JSONRenderer()
        tail: list[Processor] = [_TRACEBACKS, renderer]
    else:
        # Plain tracebacks: rich's, if it were installed, would print every frame's locals.
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback)
        tail = [renderer]  # the console renderer formats exceptions itself

    structlog.configure(
        processors=[*shared, _add_logger_name, structlog.processors.StackInfoRenderer(), *tail],
        wrapper_class=structlog.make_filtering_bound_logger(level_number),
        logger_factory=_NamedPrintLoggerFactory(out),
        # not cached: tests swap the configuration (structlog.testing.capture_logs) after
        # module-level loggers have already been used
        cache_logger_on_first_use=False,
    )
    library_level = max(level_number, _library_level())
    _route_stdlib_logging(out, library_level, [*shared, structlog.stdlib.add_logger_name], tail)


def _library_level() -> int:
    """The lowest level of a library's stdlib record that is logged: ``VFL_LIBRARY_LOG_LEVEL``, else INFO."""
    name = os.environ.get(LIBRARY_LEVEL_ENV, "info")
    if name.lower() not in LEVELS:
        raise ValueError(f"{LIBRARY_LEVEL_ENV}={name!r} is not a log level; choose one of {', '.join(LEVELS)}")
    return logging.getLevelNamesMapping()[name.upper()]


def _route_stdlib_logging(out: TextIO, level_number: int, pre_chain: list[Processor], tail: list[Processor]) -> None:
    """Render stdlib records (grpc, asyncio, ...) through the same processors as our own events."""
    handler = _VflHandler(out)
    handler.setLevel(level_number)  # also for a library that set its own logger's level lower
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=pre_chain,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _VflHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_number)  # below it, a library does not even build its records


def get_logger(name: str) -> FilteringBoundLogger:
    """A structlog logger whose events carry `logger=name`, e.g. the module's __name__.

    Safe to call at import time: the logger resolves the configuration when it is used.
    """
    logger: FilteringBoundLogger = structlog.get_logger(name)
    return logger


def progress(iterable: Iterable[T], *, total: int | None, desc: str) -> Iterable[T]:
    """Wrap iterable in a tqdm bar when stderr is a terminal; otherwise return it unchanged.

    Progress bars in a daemon's log file are noise (carriage returns, partial lines), so they
    are shown only to a person watching.
    """
    if not sys.stderr.isatty():
        return iterable
    from tqdm import tqdm  # imported lazily: daemons without a terminal never need it

    bar: Iterable[T] = tqdm(iterable, total=total, desc=desc, file=sys.stderr, leave=False)
    return bar


def progress_callback(desc: str) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` callback that drives a tqdm bar on a terminal, else None.

    For work that reports its own progress (PSI's process pool) rather than being iterated.
    """
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, unit="id")
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update
