"""A served federated model's passive parties coming back: rejoin, load their part, answer again.

While a job's model is served after training, a party whose daemon reconnected may join the
job again, if it still holds what it trained with (``RejoinCheck.refusal``). Its record then
goes "joined" (Join done), "loading" (told to load its trained part: ``next_rejoined``) and back
to answering (``readmitted``). A refusal is kept, so the model is not offered to it again.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

import structlog

from vflcore.errors import JoinRejected
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflserver.federation.membership import Membership
from vflserver.federation.party_members import RejoinCheck

log = structlog.get_logger(__name__)


class Rejoins:
    """Parties that come back into the served model of a job, and those refused."""

    def __init__(self, members: Membership) -> None:
        self.members = members
        #: Set while the job's model is served (``accept``): a party that reconnects may join again.
        self.terms: RejoinCheck | None = None

    def accept(self, terms: RejoinCheck) -> None:
        """From now on the job's model is served: a party that reconnects may join again on ``terms``."""
        self.terms = terms

    @property
    def open(self) -> bool:
        """Whether the job's model is served now, open to parties that reconnect."""
        return self.members.state == "serving" and self.terms is not None

    def join(
        self, party: int, id_set_digest: bytes, cached_alignments: frozenset[bytes], held: tuple[Position, ...]
    ) -> JobSpec:
        """Take back a party into the served model, if it still holds what it trained with.

        A refusal is kept (``refused``): offering the model again would only repeat it.
        """
        terms, job_id = self.terms, self.members.job.job_id
        assert terms is not None
        member = self.members.member(party)
        with self.members.lock:
            if member.joined and member.online:
                raise JoinRejected(
                    f"party {party} is still connected to the served model of job {job_id!r}; a party holds one "
                    "connection (is a second vfl-client running with this certificate?)"
                )
            refused = terms.refusal(job_id, party, member.id_set_digest, id_set_digest, cached_alignments, held)
            if refused is None:
                member.joined, member.online, member.rejoin = True, False, "joined"
                member.lost = member.failure = member.refused = None
                member.session += 1  # an old stream that closes late must not count
                member.tasks = queue.Queue()  # nothing queued for the old session is meant for this one
                member.released = False
                member.checkpoints, member.last_seen = held, time.monotonic()
        if refused is not None:
            self.refuse(party, refused)
            raise JoinRejected(refused)
        log.info("party_rejoined", peer=party)
        return self.members.job

    def forget_session(self, party: int, reason: str) -> None:
        """``party`` lost its session with the served model (it asked NextJob): offer it the job to join again."""
        member = self.members.member(party)
        with self.members.lock:
            if not member.joined:
                return
            member.joined = member.online = False
            member.offline_since = member.offline_since or time.monotonic()
            member.lost, member.rejoin, member.failure = reason, None, None
            member.session += 1
        log.warning("party_session_lost", peer=party, reason=reason)

    def next_rejoined(self, timeout_s: float, stopped: Callable[[], bool] = lambda: False) -> int | None:
        """A party that joined the served model again and subscribed, now marked "loading".

        None after ``timeout_s``, or at once when ``stopped()`` turns true and ``wake_waiters`` is called.
        """
        deadline = time.monotonic() + timeout_s
        with self.members.lock:
            while not stopped():
                found = next((m for m in self.members.all() if m.rejoin == "joined" and m.online), None)
                if found is not None:
                    found.rejoin = "loading"
                    return found.party
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.members.changed.wait(remaining)
            return None

    def refuse(self, party: int, reason: str) -> None:
        """``party`` cannot come back into the served model (``reason``): it is not offered it again."""
        member = self.members.member(party)
        with self.members.lock:
            member.refused, member.rejoin = reason, None
        log.error("party_rejoin_refused", peer=party, reason=reason)

    def readmitted(self, party: int) -> None:
        """``party`` was told to load its trained part: requests may ask it again."""
        member = self.members.member(party)
        with self.members.lock:
            member.rejoin = None
        log.info("party_readmitted", peer=party)
