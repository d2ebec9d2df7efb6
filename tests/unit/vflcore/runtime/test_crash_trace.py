"""vflcore.runtime.crash_trace: a process killed by a fatal signal leaves every thread's stack on stderr and in its log.

Each case runs a small Python process that arms the traces and then signals itself, as a
segfault in a C extension would end it. ``subprocess.run`` returns once stderr reaches its end,
which is when the relay (which holds stderr too) has copied the trace and exited, so the log file
is complete when it is read: no waiting.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

_CRASH = """
import os, signal, sys, threading
from pathlib import Path
from vflcore.runtime.crash_trace import enable_crash_traces
log = Path(sys.argv[1]) if sys.argv[1] != "-" else None
print("armed:", enable_crash_traces(log), flush=True)
if len(sys.argv) > 3:
    os.rename(sys.argv[1], sys.argv[3])  # logrotate's rename, before the crash
ready = threading.Event()
threading.Thread(target=lambda: (ready.set(), threading.Event().wait()), name="idle", daemon=True).start()
ready.wait()
os.kill(os.getpid(), getattr(signal, sys.argv[2]))
"""

#: What faulthandler writes for each signal's death.
_FATAL = {
    "SIGSEGV": "Fatal Python error: Segmentation fault",
    "SIGABRT": "Fatal Python error: Aborted",
    "SIGBUS": "Fatal Python error: Bus error",
    "SIGFPE": "Fatal Python error: Floating point exception",
}


def _crash(log: Path | None, signame: str, renamed: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-c", _CRASH, str(log) if log else "-", signame, *([str(renamed)] if renamed else [])]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _has_trace(text: str, signame: str) -> bool:
    """The fatal-error line, and a stack for the crashing thread and for the other one."""
    return _FATAL[signame] in text and "Current thread 0x" in text and "\nThread 0x" in text


@pytest.mark.parametrize("signame", sorted(_FATAL))
def test_the_trace_of_every_thread_goes_to_the_log_file_and_to_stderr(tmp_path: Path, signame: str) -> None:
    log = tmp_path / "daemon.log"
    log.write_text('{"event": "service_started"}\n')
    done = _crash(log, signame)
    assert done.returncode == -getattr(signal, signame), done.stderr
    assert f"armed: {log} and stderr" in done.stdout
    assert _has_trace(done.stderr, signame), done.stderr
    text = log.read_text()
    assert text.startswith('{"event": "service_started"}\n'), "the log file was appended to, not replaced"
    assert _has_trace(text, signame), text


def test_without_a_log_file_the_trace_goes_to_stderr(tmp_path: Path) -> None:
    done = _crash(None, "SIGSEGV")
    assert done.returncode == -signal.SIGSEGV
    assert "armed: stderr" in done.stdout
    assert _has_trace(done.stderr, "SIGSEGV"), done.stderr


def test_after_a_rotation_the_trace_goes_to_the_fresh_file(tmp_path: Path) -> None:
    """logrotate renamed the file: the trace goes to a file under the old name, the renamed one is left as it was."""
    log, rotated = tmp_path / "daemon.log", tmp_path / "daemon.log.1"
    log.write_text("before\n")
    done = _crash(log, "SIGSEGV", renamed=rotated)
    assert done.returncode == -signal.SIGSEGV, done.stderr
    assert rotated.read_text() == "before\n"
    assert _has_trace(log.read_text(), "SIGSEGV")
    assert _has_trace(done.stderr, "SIGSEGV")


def test_a_clean_exit_writes_nothing_and_leaves_no_relay(tmp_path: Path) -> None:
    """The relay exits at the daemon's exit (end of its input): run() would not return while it held stderr."""
    log = tmp_path / "daemon.log"
    code = "import sys; from pathlib import Path; from vflcore.runtime.crash_trace import enable_crash_traces; "
    code += "enable_crash_traces(Path(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert not log.exists() or log.read_text() == ""
