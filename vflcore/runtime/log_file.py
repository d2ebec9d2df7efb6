"""``--log-file PATH``: a daemon's log lines appended to a file that logrotate can rotate, reopened on SIGHUP.

Why a file: under systemd the journal takes stderr, but a host without it (a plain init script,
``nohup``, a container with a log volume) has nowhere to keep stderr for months. Why reopen on
SIGHUP: logrotate then renames the file and signals the daemon (``postrotate``), and the daemon
writes to a fresh file under the old name; ``copytruncate`` would lose the lines written between
its copy and its truncate.

Why mode 0640 for a file this creates: the log is worth reading by an administrator's group (a
log shipper, ``adm``) without root, and it holds no secret. No log line carries a tensor value, a
sample ID or a feature value (docs/explanation/privacy.md#logs), and keys are never logged. Nothing in it is
writable by anyone but the daemon's user. A file that exists already keeps its mode (logrotate's
``create`` sets it).

A line is never split between the old file and the new one. structlog prints a line as two writes
(the text, then the newline), so each thread's text is held until its newline and then goes out
in one ``write(2)`` to an ``O_APPEND`` descriptor, under the lock that a reopen also takes. The
SIGHUP handler only starts a thread that reopens: the signal may arrive while the main thread
holds that lock.
"""

from __future__ import annotations

import contextvars
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from vflcore.errors import ConfigError
from vflcore.runtime.logs import get_logger

__all__ = ["FILE_MODE", "LogFile", "reopen_on_sighup"]

#: Mode of a log file this module creates (before the umask): see the module docstring.
FILE_MODE = 0o640

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC

log = get_logger(__name__)


class LogFile:
    """A text stream that appends whole lines to ``path`` and can reopen it; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._pending = threading.local()
        self._fd = _open(self.path)

    # ---- the stream that structlog and logging write to ----------------------------------------

    def write(self, text: str) -> int:
        """Hold ``text`` until this thread's line is complete, then append the line in one write."""
        pending: str = getattr(self._pending, "text", "") + text
        if pending.endswith("\n"):
            self._pending.text = ""
            self._append(pending)
        else:
            self._pending.text = pending
        return len(text)

    def flush(self) -> None:
        """Append what this thread holds even without its newline (nothing is buffered otherwise)."""
        pending: str = getattr(self._pending, "text", "")
        if pending:
            self._pending.text = ""
            self._append(pending)

    def isatty(self) -> bool:
        return False

    # ---- the file ----------------------------------------------------------------------------------

    def reopen(self) -> None:
        """Open ``path`` afresh (create it if it was moved away), then close the old descriptor.

        An OSError leaves the old descriptor in use, so no line is lost to a failed reopen.
        """
        fresh = _open(self.path)
        with self._lock:
            old, self._fd = self._fd, fresh
        os.close(old)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _append(self, text: str) -> None:
        data = memoryview(text.encode("utf-8", "backslashreplace"))
        with self._lock:
            if self._fd < 0:
                return  # closed at exit: a line from a thread that outlived it is dropped
            while data:
                data = data[os.write(self._fd, data) :]


def reopen_on_sighup(log_file: LogFile) -> None:
    """Reopen ``log_file`` on SIGHUP and log ``log_file_reopened`` as the fresh file's first line.

    Call from the main thread. Without this, SIGHUP ends the process, as its default action does.
    """

    def handle(signum: int, frame: FrameType | None) -> None:
        context = contextvars.copy_context()  # the party bound at start, for the line that says so
        threading.Thread(
            target=context.run, args=(_reopen_and_say, log_file), name="log-file-reopen", daemon=True
        ).start()

    signal.signal(signal.SIGHUP, handle)


def _reopen_and_say(log_file: LogFile) -> None:
    try:
        log_file.reopen()
    except ConfigError as exc:
        log.error("log_file_reopen_failed", path=str(log_file.path), error=str(exc))  # into the old file
        print(f"{exc}; logging goes on to the file as it was opened", file=sys.stderr, flush=True)
        return
    log.info("log_file_reopened", path=str(log_file.path))


def _open(path: Path) -> int:
    """A descriptor that appends to ``path``; a ConfigError naming it and what to do if it cannot be had."""
    try:
        return os.open(path, _FLAGS, FILE_MODE)
    except OSError as exc:
        if not path.parent.is_dir():
            hint = f"create the folder {path.parent}, writable by the daemon's user"
        elif path.is_dir():
            hint = "it is a folder; give a file name"
        else:
            hint = "let the daemon's user write to it (and to its folder, for logrotate's fresh file)"
        raise ConfigError(f"--log-file {path}: cannot open it to append ({exc.strerror}); {hint}") from exc
