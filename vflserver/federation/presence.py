"""Which passive parties' daemons are connected to the server now, whether or not a job names them.

The job runner starts a job only once every party it names is connected, so that a job waiting
for a daemon that is down does not hold the queue (``vflserver.jobs.scheduling``). An idle
daemon is always in a ``NextJob`` long poll (``JobBoard.next_offer``): each one open here is a
sign of life, and a call's end is noticed within its poll interval when the daemon goes (its
connection closes, so gRPC cancels the call). Between two polls a daemon is gone for a moment
only, so a party stays connected for ``linger_s`` after its last call ended. A party taking
part in the open job is not polling; the board counts it through that job's membership.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: How long a party counts as connected after its last NextJob call ended: far longer than the
#: moment between two calls of a daemon, far shorter than any job's join limit.
LINGER_S = 3.0


class PartyPresence:
    """Per party: the NextJob calls open now, and when its last one ended."""

    def __init__(self, linger_s: float = LINGER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.linger_s = linger_s
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}
        self._last: dict[int, float] = {}
        self._listeners: list[Callable[[], None]] = []

    def on_arrival(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from a gRPC thread; it must be quick) whenever a party's call opens."""
        with self._lock:
            self._listeners.append(listener)

    @contextmanager
    def polling(self, party: int) -> Iterator[None]:
        """``party`` is connected while this block runs (one NextJob call)."""
        with self._lock:
            self._open[party] = self._open.get(party, 0) + 1
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        try:
            yield
        finally:
            self.seen(party)
            with self._lock:
                self._open[party] -= 1
                if not self._open[party]:
                    del self._open[party]

    def seen(self, party: int) -> None:
        """A sign of life from ``party`` now (a call that ended, a job it just left)."""
        with self._lock:
            self._last[party] = self._clock()

    def connected(self, party: int) -> bool:
        """Whether ``party``'s daemon has a NextJob call open, or had one within ``linger_s``."""
        with self._lock:
            if self._open.get(party):
                return True
            last = self._last.get(party)
        return last is not None and self._clock() - last <= self.linger_s

    def last_seen(self, party: int) -> float | None:
        """When ``party`` was last connected (``clock()`` units): now if it is; None if never."""
        with self._lock:
            if self._open.get(party):
                return self._clock()
            return self._last.get(party)
