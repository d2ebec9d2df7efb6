"""An emulated WAN link: a TCP proxy that adds one-way delay, a bandwidth cap and jitter.

Parties in vertical FL sit in different organisations, so they talk over a WAN. ``tc netem``
is not available on these machines and ``tc tbf`` cannot add delay, so the link is emulated in
user space, between one passive party and the server. Mutual TLS runs end to end through it: the
proxy relays ciphertext and never sees a tensor.

Each direction of each connection is a lane modelled as a store-and-forward link:

- a chunk read from the sender leaves the link's queue when the link is free, taking
  ``len(chunk) * 8 / bits_per_s`` to serialise (the token bucket, one token per bit);
- it is delivered ``one_way_s`` (plus jitter, drawn per chunk, never reordering) after it left;
- the queue holds at most ``queue_bytes``; a full queue stops reading from the sender, so TCP's
  own flow control pushes back on it, as a router's buffer would.

The two directions are independent (full duplex), each at the full rate. The proxy's own test
(``tests/integration/hosts/test_wan_link.py``) holds the delays it schedules to the settings, and the
RTT and the throughput measured through it within 10 % of them. A test and bench tool only: the product never runs it.
"""

from __future__ import annotations

import collections
import random
import socket
import threading
import time
from dataclasses import dataclass

from vfltesting.proxy import CuttableProxy

__all__ = ["LINKS", "LinkProfile", "WanProxy"]

#: How many scheduled delays each lane keeps (``_Lane.scheduled``).
_SCHEDULE_KEPT = 4096

#: Bytes read from a sender at once: small enough that a chunk's serialisation time (5 ms at
#: 100 Mbit/s) does not swamp the RTT of a small message.
_CHUNK = 1 << 16


@dataclass(frozen=True)
class LinkProfile:
    """A link: round-trip time, rate in each direction, and jitter on each one-way delay."""

    rtt_ms: float
    mbit_s: float
    jitter_ms: float = 0.0
    #: The router's buffer per direction; 0: two bandwidth-delay products, at least 256 KiB.
    queue_bytes: int = 0

    @property
    def one_way_s(self) -> float:
        return self.rtt_ms / 2000

    @property
    def bits_per_s(self) -> float:
        return self.mbit_s * 1e6

    @property
    def queue_limit(self) -> int:
        if self.queue_bytes:
            return self.queue_bytes
        return max(256 * 1024, int(2 * self.bits_per_s / 8 * self.rtt_ms / 1000))

    def __str__(self) -> str:
        jitter = f" ± {self.jitter_ms:g} ms" if self.jitter_ms else ""
        return f"{self.rtt_ms:g} ms RTT{jitter}, {self.mbit_s:g} Mbit/s"


#: The two links of ``make bench-wan`` (issue 17): a good and a poor inter-organisation link.
LINKS = (LinkProfile(rtt_ms=20, mbit_s=100), LinkProfile(rtt_ms=50, mbit_s=20))


class _Lane:
    """One direction of one connection: queue, serialise at the link's rate, deliver after the delay."""

    def __init__(self, profile: LinkProfile, rng: random.Random) -> None:
        self.profile, self.rng = profile, rng
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued = 0
        self.changed = threading.Condition()
        self.link_free_at = 0.0  # when the last queued chunk has finished leaving
        self.last_delivery = 0.0
        self.closed = False
        #: Each chunk's one-way delay as scheduled (from its read to its delivery time), the latest
        #: ``_SCHEDULE_KEPT``: what the link was set to do, apart from how late the host's threads ran.
        self.scheduled: collections.deque[float] = collections.deque(maxlen=_SCHEDULE_KEPT)

    def put(self, chunk: bytes) -> None:
        """Queue ``chunk`` (blocking while the router's buffer is full); it will arrive at its delivery time."""
        profile = self.profile
        with self.changed:
            while self.queued >= profile.queue_limit and not self.closed:
                self.changed.wait()
            now = time.monotonic()
            departed = max(now, self.link_free_at) + len(chunk) * 8 / profile.bits_per_s
            self.link_free_at = departed
            jitter = self.rng.uniform(-profile.jitter_ms, profile.jitter_ms) / 1000 if profile.jitter_ms else 0.0
            # A link delivers in order: jitter may delay a chunk, never let it overtake the last one.
            delivery = max(departed + max(0.0, profile.one_way_s + jitter), self.last_delivery)
            self.last_delivery = delivery
            self.scheduled.append(delivery - now)
            self.queue.append((delivery, chunk))
            self.queued += len(chunk)
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    def take(self) -> bytes | None:
        """The next chunk once its delivery time has come; None when the lane is closed and empty."""
        with self.changed:
            while not self.queue:
                if self.closed:
                    return None
                self.changed.wait()
            delivery, chunk = self.queue[0]
        wait = delivery - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        with self.changed:
            self.queue.popleft()
            self.queued -= len(chunk)
            self.changed.notify_all()
        return chunk


class WanProxy(CuttableProxy):
    """``CuttableProxy`` whose every connection crosses an emulated link of ``profile``."""

    def __init__(self, target: tuple[str, int], profile: LinkProfile, *, seed: int = 0) -> None:
        self.profile = profile
        self._rng = random.Random(seed)
        #: Bytes delivered across the link, both directions, every connection.
        self.delivered = 0
        #: Every lane made, in order (two per connection: client to server, then server to client).
        self.lanes: list[_Lane] = []
        super().__init__(target)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Read from ``source`` into a lane; a second thread delivers the lane to ``sink`` on time."""
        lane = _Lane(self.profile, random.Random(self._rng.random()))
        with self._lock:
            self.lanes.append(lane)
        deliverer = threading.Thread(target=self._deliver, args=(lane, source, sink), name="wan-deliver", daemon=True)
        deliverer.start()
        try:
            while chunk := source.recv(_CHUNK):
                lane.put(chunk)
        except OSError:
            pass
        finally:
            lane.close()  # what was sent before the close still arrives, then both sides close

    def _deliver(self, lane: _Lane, source: socket.socket, sink: socket.socket) -> None:
        try:
            while (chunk := lane.take()) is not None:
                sink.sendall(chunk)
                with self._lock:
                    self.delivered += len(chunk)
        except OSError:
            pass
        finally:
            self._drop(source, sink)
