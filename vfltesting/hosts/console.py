"""The test's handle on the operator's program (``operator_app``), which runs on the operator's host.

The test process has no address on the hosts' network, so it asks the program on the operator's
host to make each job or inference call and reads the reply. ``Console`` copies the program into
the operator's folder, starts it inside that host's namespace with the host's venv, and
exchanges one JSON line per call with it. Calls are serialised: one at a time.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from vfltesting.hosts import operator_app

#: The file name the program gets in the operator's folder (run as ``python -m vfl_console``).
PROGRAM = "vfl_console.py"


class ConsoleError(AssertionError):
    """The operator's program exited, or did not answer in time."""


class Console:
    """``python -m vfl_console SERVER ENDPOINT certs`` on the operator's host; ``call`` sends one request."""

    def __init__(self, command: list[str], folder: Path, server: str, endpoint: str, *, env: Mapping[str, str]) -> None:
        shutil.copy2(Path(operator_app.__file__), folder / PROGRAM)
        argv = [*command, server, endpoint, str(folder / "certs")]
        self._log = (folder / "console.log").open("ab")
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=folder, env=dict(env)
        )
        self._lock = threading.Lock()
        self._folder = folder

    def call(self, op: str, timeout_s: float = 60, **fields: Any) -> dict[str, Any]:
        """Send ``{"op": op, **fields}``; the program's reply (``failed`` set, with the message, if the call raised)."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        with self._lock:
            proc.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
            line = proc.stdout.readline() if ready else b""
        if not line:
            log = (self._folder / "console.log").read_text(errors="replace")[-3000:]
            raise ConsoleError(f"the operator's program gave no answer to {op!r} within {timeout_s:.0f} s\n{log}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's record; fails if the call failed."""
        reply = self.call("get", job=job_id)
        assert "failed" not in reply, reply
        return reply

    def submit(self, document: Mapping[str, Any]) -> str:
        reply = self.call("submit", document=dict(document))
        assert "failed" not in reply, reply
        return str(reply["id"])

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._log.close()

    def __enter__(self) -> Console:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
