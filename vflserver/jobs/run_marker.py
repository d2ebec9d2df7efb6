"""``<store>.running``: whether the last server on this job store stopped cleanly, told at the next start.

Why: a server that died (SIGSEGV, SIGKILL, a power cut) writes nothing on its way out, and the
next start looked like any other. An operator then had no line in the log to say that a crash
happened, when, and which jobs it cost. The marker is written when a server opens its store and
removed by its clean stop, so a marker found at start means the last run ended without one. It
sits beside the store and its ``.lock``, and is read and written only by the server holding that
lock, so two servers never race over it.

Why not the lock file: the kernel drops the lock when the process dies, which is what makes a
crash leave no stale lock; it cannot also say that the process died. Why not a row in the store:
a store written by an older server would need a migration for a fact about one process's life.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LastRun", "RunMarker"]


@dataclass(frozen=True)
class LastRun:
    """What the marker of a run that did not stop cleanly says: its process id and when it started."""

    pid: int | None
    started_at: float | None


class RunMarker:
    """``<store>.running``: ``claim`` it after the store is open and locked, ``release`` it at a clean stop."""

    def __init__(self, store_path: Path) -> None:
        self.path = Path(store_path).with_name(Path(store_path).name + ".running")

    def claim(self) -> LastRun | None:
        """Mark this run as running; return the last run if it had not stopped cleanly, else None.

        Written and synced before anything runs, so a crash a moment later is still found.
        """
        last = self._read()
        text = json.dumps({"pid": os.getpid(), "started_at": time.time()})
        partial = self.path.with_name(self.path.name + ".tmp")
        with partial.open("w") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(self.path)
        return last

    def release(self) -> None:
        """This run stopped cleanly: the next start finds no marker."""
        self.path.unlink(missing_ok=True)

    def _read(self) -> LastRun | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        values: dict[str, object] = {}
        with contextlib.suppress(ValueError):  # cut short by the crash itself: still an unclean stop
            loaded = json.loads(text)
            values = loaded if isinstance(loaded, dict) else {}
        pid, started = values.get("pid"), values.get("started_at")
        return LastRun(
            pid=pid if isinstance(pid, int) else None,
            started_at=float(started) if isinstance(started, int | float) else None,
        )
