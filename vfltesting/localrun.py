"""Running the daemons as local processes: what the demo and the benchmarks share.

The server is started with ``--listen 127.0.0.1:0 --port-file F`` so that no fixed port is ever
needed; the launcher waits here for the port it actually bound.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol


class Daemon(Protocol):
    """What is used here of a daemon's process: ``subprocess.Popen``, or ``vfltesting.forked.ForkedDaemon``."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, signum: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def wait_for_port(
    port_file: Path,
    server: Daemon,
    timeout_s: float,
    *,
    poll_s: float = 0.05,
    while_waiting: Callable[[], None] | None = None,
) -> int:
    """The port vfl-server wrote to ``port_file``; fails early if the server exits first.

    ``while_waiting`` is called at every poll, every ``poll_s``: the PSI bench samples its
    processes there, since the server's start-up is part of what it measures.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text())
        if server.poll() is not None:
            raise RuntimeError(f"vfl-server exited with code {server.returncode} before listening")
        if while_waiting is not None:
            while_waiting()
        time.sleep(poll_s)
    raise RuntimeError(f"vfl-server did not listen within {timeout_s:.0f} s")


def wait_all(procs: Mapping[str, Daemon], timeout_s: float) -> dict[str, int]:
    """Every process's exit code, waiting at most ``timeout_s`` in all.

    Whatever happens (a timeout, Ctrl-C), no process is left running: stragglers are terminated
    before this returns or raises.
    """
    deadline = time.monotonic() + timeout_s
    try:
        return {name: proc.wait(timeout=max(1.0, deadline - time.monotonic())) for name, proc in procs.items()}
    finally:
        stop_all(procs)


#: How long the daemons may take to exit after SIGTERM before they are killed. Generous: a loaded
#: 2-core machine took over 10 s to stop vfl-server, and a teardown that raised then left the
#: daemons running into the next tests. How fast a daemon stops is ``test_signals``' question.
STOP_GRACE_S = 60.0


def stop_all(procs: Mapping[str, Daemon], grace_s: float | None = None) -> None:
    """SIGTERM every process still running, all at once, and reap them; kill -9 any still running after
    ``grace_s`` (default ``STOP_GRACE_S``)."""
    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    running = [proc for proc in procs.values() if proc.poll() is None]
    for proc in running:
        proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
