"""A daemon that dies on a fatal signal leaves a traceback of every thread on stderr and in ``--log-file``.

Why: a SIGSEGV in a C extension (numpy, grpc, torch) ends the process at once. Python's own
error handling never runs, so without this nothing is logged and the only trace is a line in the
kernel log, and under systemd the daemon restarts with no word of why. The standard library's
``faulthandler`` writes the Python stack of every thread from inside the signal handler, with
async-signal-safe ``write(2)`` calls only, for SIGSEGV, SIGBUS, SIGABRT, SIGFPE and SIGILL, and
then lets the signal kill the process as it would have.

Why a relay process when there is a log file: ``faulthandler`` writes to one descriptor, and its
``register(signum, chain=True)`` refuses the fatal signals ("use enable() instead"). A second
writer inside the dying process cannot run (no Python code runs in a fatal signal handler), and
an OS descriptor cannot write to two files. So with ``--log-file``, ``faulthandler`` writes to a
pipe, and a small child process (``python -I -S``, a few MB, blocked in ``read`` until then)
copies whatever comes through it to the log file and to stderr. The child outlives the daemon by
the moment it takes to copy the trace: the daemon's death closes the pipe, and at end of input the
child exits. It opens the log file by its path for each piece, so a file that logrotate renamed
gets no trace; the fresh one under the old name does. It ignores SIGINT, SIGTERM and SIGHUP: a
Ctrl-C on a terminal or a ``systemctl stop`` signals the whole process group, and the relay must
still be there if the daemon dies while it stops. Without ``--log-file`` the log is stderr, and
``faulthandler`` writes there directly.

The trace holds file names, line numbers and function names, no variable's value: it cannot
carry a tensor value, a sample ID or a feature value, as no log line may (docs/explanation/privacy.md#logs).
"""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

__all__ = ["STOP_DEADLINE_S", "arm_stop_deadline", "enable_crash_traces"]

#: The relay child's whole program: copy its input, piece by piece, to the log file (argv[1]) and
#: to stderr, until end of input. Kept to the interpreter's built-ins (-I -S: no site, no venv).
_RELAY = """
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
path = sys.argv[1]
def put(fd, data):
    while data:
        data = data[os.write(fd, data):]
while True:
    data = os.read(0, 65536)
    if not data:
        break
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            put(fd, data)
        finally:
            os.close(fd)
    except OSError:
        pass
    try:
        put(2, data)
    except OSError:
        pass
"""

_STDERR = 2

#: How long a daemon may take to exit after SIGINT or SIGTERM. Under the shipped systemd unit
#: (``TimeoutStopSec=60``) a daemon still running then is killed with SIGKILL, which leaves no
#: trace; this comes first, with the stack of every thread.
STOP_DEADLINE_S = 45.0

#: What ``faulthandler`` writes to, kept open for the life of the process (it holds only the fd).
_sink: IO[bytes] | None = None


def enable_crash_traces(log_file: Path | None) -> str:
    """Arm ``faulthandler`` for every fatal signal, all threads; returns where a trace goes, in words.

    ``log_file`` is the daemon's ``--log-file`` (None: its log is stderr). Call once, at start,
    after the log file was opened (so its path is known to be writable). An OSError if the relay
    cannot be started (no process or descriptor left): the daemon exits then, as for any start-up
    failure.
    """
    global _sink
    if log_file is None:
        # fd 2 itself, not sys.stderr: what the process's stderr is, whatever Python-level
        # redirection (a test's capture) holds sys.stderr at this moment
        faulthandler.enable(file=_STDERR, all_threads=True)
        return "stderr"
    read_end, write_end = os.pipe()  # both close-on-exec: only the relay gets the read end, as its stdin
    try:
        subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _RELAY, str(Path(log_file).absolute())],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            # stderr inherited: the daemon's own (the journal under systemd)
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    if _sink is not None:
        _sink.close()
    _sink = os.fdopen(write_end, "wb", buffering=0)
    faulthandler.enable(file=_sink, all_threads=True)
    return f"{log_file} and stderr"


def arm_stop_deadline(seconds: float | None = None) -> None:
    """If this process is still running ``seconds`` (``STOP_DEADLINE_S``) from now, write every thread's stack where a
    crash trace goes (``enable_crash_traces``; stderr before that is called) and exit 1.

    Called when a stop signal arrives. A stop should take well under a second
    (docs/how-to/systemd.md, stopping); one that hangs (a thread blocked on a peer that is gone, a
    native library's exit handler) otherwise ends only by SIGKILL, with nothing to say which
    thread held it. ``faulthandler``'s watchdog is a native thread: it needs neither the GIL nor
    any lock a hung thread could hold, and arming it from a signal handler takes no Python lock.
    """
    after = STOP_DEADLINE_S if seconds is None else seconds
    faulthandler.dump_traceback_later(after, exit=True, file=_sink if _sink is not None else _STDERR)
