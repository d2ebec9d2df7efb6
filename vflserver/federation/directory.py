"""What the server knows of each party's daemon, for the operator's console: last seen, version, certificate expiry.

The job's own bookkeeping (``PassiveParties``) lives only as long as a job, and knows a party only
while it takes part. An operator asks about the parties between jobs too: is party 3's daemon
reachable, which version does it run, when does its certificate run out. So every call a party
makes (NextJob, Heartbeat, Join) tells the directory it was seen, with the expiry of the
certificate it presented; Join adds its client version. Nothing else is kept: no address, no data.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PartySeen:
    """One party's daemon as last seen by the server (times: seconds since the epoch)."""

    party: int
    last_seen: float
    client_version: str = ""
    certificate_expires: float | None = None


class PartyDirectory:
    """Thread-safe: the gRPC handlers write, the console reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[int, PartySeen] = {}

    def saw(self, party: int, *, expires: float | None = None, client_version: str = "") -> None:
        """A call from ``party`` now; ``expires`` and ``client_version`` update what is known when given."""
        now = time.time()
        with self._lock:
            known = self._seen.get(party, PartySeen(party, now))
            self._seen[party] = replace(
                known,
                last_seen=now,
                certificate_expires=expires if expires is not None else known.certificate_expires,
                client_version=client_version or known.client_version,
            )

    def get(self, party: int) -> PartySeen | None:
        with self._lock:
            return self._seen.get(party)

    def all(self) -> list[PartySeen]:
        with self._lock:
            return sorted(self._seen.values(), key=lambda p: p.party)


__all__ = ["PartyDirectory", "PartySeen"]
