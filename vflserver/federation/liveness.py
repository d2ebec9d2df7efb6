"""Whether each passive party of a job is still there, and why not in words.

A party is online while its Subscribe stream is open, and shows life by Join, Subscribe and
Heartbeat. The training loop asks ``check_online`` while it waits for a party: a party that
reported a failure, whose stream closed for longer than the grace, that went silent or that
restarted is given up on, with a reason that says what the server saw.

What closes a stream when a party's network goes away (a pulled cable): gRPC sets the server
socket's ``TCP_USER_TIMEOUT`` to its keepalive timeout (``KEEPALIVE_SERVER_OPTIONS``, 20 s), so
data the server sent (a task, an answer, a keepalive ping) that goes unacknowledged that long
makes the kernel drop the connection, and gRPC ends the party's calls. A daemon that stops
closes its connection at once instead. The silence before the close tells the two apart.
"""

from __future__ import annotations

import queue
import time

import structlog

from vflcore.errors import JoinRejected, PartyLost, PartyUnavailable, TrainingDiverged, VflError
from vflcore.security.tls import KEEPALIVE_SERVER_OPTIONS
from vflcore.work_items import Task
from vflserver.federation.membership import Membership

log = structlog.get_logger(__name__)

# A party whose Subscribe stream closed gets this long to reconnect before a waiting step fails.
OFFLINE_GRACE_S = 5.0

#: How long data the server sent may go unanswered before its connection is dropped: gRPC's
#: keepalive timeout, which it also sets as the socket's TCP_USER_TIMEOUT (gRPC proposal A18).
UNANSWERED_S = dict(KEEPALIVE_SERVER_OPTIONS)["grpc.keepalive_timeout_ms"] / 1000


def closed_in_words(silent_s: float) -> str:
    """Why a party whose stream closed is lost, from how long it had been silent when it closed.

    Silent for ``UNANSWERED_S`` or more: the connection timed out (its network or host went
    away). Less: its daemon or its host closed the stream.
    """
    if silent_s >= UNANSWERED_S:
        return (
            f"its connection to the server timed out: nothing came from it for {silent_s:.0f} s, and the server "
            f"drops a connection whose data goes unacknowledged for {UNANSWERED_S:g} s (its network or its host "
            "went away)"
        )
    return "its connection to the server closed (its daemon stopped, or its host closed the connection)"


class Liveness:
    """Each party's Subscribe stream and signs of life, and whether waiting on it is still worth it."""

    def __init__(
        self, members: Membership, *, offline_grace_s: float = OFFLINE_GRACE_S, heartbeat_timeout_s: float | None = None
    ) -> None:
        self.members = members
        self.offline_grace_s = offline_grace_s
        #: A party silent for longer is lost even if its stream has not closed (None: never).
        self.heartbeat_timeout_s = heartbeat_timeout_s

    def subscribe(self, party: int) -> tuple[queue.Queue[Task], int]:
        """Mark a joined party online; its task queue feeds its Subscribe stream, known by the number returned."""
        member = self.members.member(party)
        if not member.joined:
            raise JoinRejected(f"party {party} must call Join before Subscribe")
        with self.members.lock:
            if member.online:
                raise JoinRejected(
                    f"party {party} already has a Subscribe stream open for job {self.members.job.job_id!r}; a "
                    "party holds one (is a second vfl-client running with this certificate?)"
                )
            member.online, member.offline_since = True, None
            member.session += 1
            member.last_seen = time.monotonic()
            session = member.session
            self.members.changed.notify_all()
        log.info("party_online", peer=party)
        return member.tasks, session

    def leave(self, party: int, session: int) -> None:
        """The party's Subscribe stream ``session`` closed: it is offline until it subscribes again.

        After the server sent it ``Finish`` that is the job's routine end (``party_left``, info),
        unless the job ended because of this party (it reported a failure, or was lost first);
        otherwise the party went away (``party_offline``, a warning).
        """
        member = self.members.member(party)
        with self.members.lock:
            if session != member.session:
                return  # an older stream, closed after a newer one opened
            now = time.monotonic()
            member.online, member.offline_since = False, now
            member.silent_at_close = silent = now - member.last_seen
            routine = member.released and member.failure is None and member.lost is None
        if routine:
            log.info("party_left", peer=party)
        else:
            log.warning("party_offline", peer=party, silent_s=round(silent, 1))

    def heartbeat(self, party: int) -> None:
        """A sign of life from ``party``."""
        member = self.members.member(party)
        with self.members.lock:
            member.last_seen = time.monotonic()

    def lose(self, party: int, reason: str) -> None:
        """``party`` is gone though its stream may look open (its daemon restarted): waits on it fail now."""
        member = self.members.member(party)
        with self.members.lock:
            if member.lost is None:
                now = time.monotonic()
                member.lost = reason
                member.lost_at = now if member.online or member.offline_since is None else member.offline_since
        log.warning("party_lost", peer=party, reason=reason)

    def report_failure(self, party: int, message: str) -> None:
        """A party says its side of a task failed; waits on it end with that message."""
        member = self.members.member(party)
        member.failure = message
        log.error("party_failed", peer=party, reason=message)

    def absence(self, party: int) -> str | None:
        """Why ``party`` cannot answer for a served model now, in words; None if it can."""
        member = self.members.member(party)
        if member.refused is not None:
            return f"it reconnected but cannot rejoin: {member.refused}"
        if member.failure is not None:
            return f"it reported a failure: {member.failure}"
        if member.lost is not None:
            return member.lost
        if not member.online:
            if member.rejoin == "joined":
                return "it reconnected and joined again; its task stream is not open yet"
            return "its connection to the server closed; the model serves again once its daemon reconnects"
        if member.rejoin is not None:
            return "it reconnected and is loading its trained part of the model"
        return None

    def check_online(self, party: int) -> None:
        """Raise if waiting any longer on this party is hopeless.

        A party that reported a failure is PartyUnavailable: it will fail the same way again. A
        party whose stream closed, that went silent or that restarted is PartyLost: it may come
        back, and the service resumes the job from a checkpoint when it does. The PartyLost says
        when the loss happened (``since``): the stream's close, or the last sign of life, not now.
        """
        member = self.members.member(party)
        if member.failure is not None:
            raise self._failed(party, member.failure)
        if member.lost is not None:
            raise PartyLost(party, member.lost, since=member.lost_at)
        if member.rejoin is not None or member.refused is not None:  # coming back into a served model
            raise PartyLost(party, self.absence(party) or "it is rejoining", since=member.lost_at)
        now = time.monotonic()
        if not member.online:
            since = member.offline_since or now
            if now - since >= self.offline_grace_s:
                raise PartyLost(party, closed_in_words(member.silent_at_close), since=since)
        elif self.heartbeat_timeout_s is not None and now - member.last_seen > self.heartbeat_timeout_s:
            silent = now - member.last_seen
            raise PartyLost(
                party, f"no heartbeat for {silent:.0f} s ([server] heartbeat_timeout_s)", since=member.last_seen
            )

    def _failed(self, party: int, failure: str) -> VflError:
        """A reported failure as PartyUnavailable, or as TrainingDiverged (a NaN upload refused while training too)."""
        if failure.startswith(f"{TrainingDiverged.__name__}: "):
            return TrainingDiverged("", message=failure.removeprefix(f"{TrainingDiverged.__name__}: "))
        if self.members.state == "training" and failure.startswith("TensorRejected: ") and "NaN or infinite" in failure:
            refused = failure.removeprefix("TensorRejected: ")
            return TrainingDiverged(f"party {party} sent NaN or infinite values, which the server refused ({refused})")
        return PartyUnavailable(party, f"it reported a failure: {failure}")
