"""Who is in one job: its passive parties' records, the job's phase, and the wait until all have joined.

Every other part of ``PassiveParties`` (liveness, rejoins, task dispatch, uploads) reads and
changes these records under the one lock kept here, so that a party's state is never seen half
changed by a gRPC thread and the training loop at once. ``changed`` is notified whenever a
party's state changes in a way a waiter may be waiting for (it came online, it rejoined).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from vflcore.absence import did_not_join
from vflcore.errors import JobAborted, JoinRejected, PartyUnavailable
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflserver.federation.party_members import Member

log = structlog.get_logger(__name__)


class Membership:
    """The passive parties of one job: who joined, and the job's phase as the parties see it."""

    def __init__(self, job: JobSpec) -> None:
        self.job = job
        #: "waiting" (for joins), then "aligning", "training", "serving", "finished" or "failed".
        self.state = "waiting"
        self.lock = threading.Lock()
        #: Notified when a party comes online or rejoins: ``wait_until_ready`` and ``next_rejoined`` wait on it.
        self.changed = threading.Condition(self.lock)
        self._members = {p: Member(p) for p in job.passive_parties}

    def member(self, party: int) -> Member:
        try:
            return self._members[party]
        except KeyError:
            raise JoinRejected(
                f"party {party} is not part of job {self.job.job_id!r}; "
                f"it expects parties {list(self.job.passive_parties)}"
            ) from None

    def get(self, party: int) -> Member | None:
        """``party``'s record, or None if the job does not name it."""
        return self._members.get(party)

    def parties(self) -> list[int]:
        """Every passive party of the job, in the job's order."""
        return list(self._members)

    def all(self) -> list[Member]:
        return list(self._members.values())

    def join(
        self,
        party: int,
        id_set_digest: bytes,
        id_count: int,
        cached_alignments: frozenset[bytes],
        checkpoints: tuple[Position, ...] = (),
        resumable_psi: frozenset[bytes] = frozenset(),
    ) -> JobSpec:
        """Admit a party before the job starts; what it holds is settled by PSI afterwards."""
        member = self.member(party)
        if self.state != "waiting":
            raise JoinRejected(f"job {self.job.job_id!r} is already {self.state}; party {party} joined too late")
        if id_count < 1:
            raise JoinRejected(f"party {party} has no rows; check its data file")
        with self.lock:
            member.joined = True
            member.id_count, member.id_set_digest = id_count, id_set_digest
            member.cached_alignments = cached_alignments
            member.resumable_psi = resumable_psi
            member.checkpoints = tuple(sorted(checkpoints))
            member.last_seen = time.monotonic()
        log.info("party_joined", peer=party, ids=id_count, checkpoints=[str(p) for p in member.checkpoints])
        return self.job

    def unjoin(self, party: int) -> None:
        """Forget ``party``'s join before the job started (its daemon restarted), so it can join again."""
        member = self.member(party)
        with self.lock:
            member.joined = member.online = False
            member.session += 1  # the old stream's late close must not count
        log.warning("party_rejoining", peer=party)

    def wait_until_ready(
        self, timeout_s: float, stop: threading.Event, *, late: Callable[[list[int]], Exception] | None = None
    ) -> None:
        """Block until every passive party has joined and subscribed.

        After ``timeout_s``, raise ``late(missing)``: by default ``vflcore.absence.did_not_join``,
        the wording the job's error and every party's ``Finish`` share.
        """
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while not all(m.joined and m.online for m in self._members.values()):
                if stop.is_set():
                    raise JobAborted("shutdown requested while waiting for parties")
                failed = [m for m in self._members.values() if m.failure is not None]
                if failed:  # e.g. it has no dataset of the name the job gives it
                    raise PartyUnavailable(failed[0].party, f"it cannot take part: {failed[0].failure}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = [p for p, m in self._members.items() if not (m.joined and m.online)]
                    raise (late or (lambda absent: did_not_join(absent, timeout_s)))(missing)
                self.changed.wait(min(0.5, remaining))

    def wake_waiters(self) -> None:
        """Wake every thread waiting on the parties' state, to look again (a waiter told to stop)."""
        with self.lock:
            self.changed.notify_all()

    def online_parties(self) -> list[int]:
        return [p for p, m in self._members.items() if m.online]
