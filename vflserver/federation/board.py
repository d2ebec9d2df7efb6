"""Which job the Federation service works for now, and the offers passive parties wait for.

Jobs run one at a time, so at any moment at most one ``PassiveParties`` is open. The gRPC
handlers look it up here on every call; the runner opens a job's parties when the job starts and
closes them when it ends. A passive party's daemon waits in ``next_offer`` (the NextJob call)
until a job that names it is waiting for its parties; while it waits it counts as connected
(``presence``), which is what the runner asks before it starts a job (``connected``). A job whose
federated model is served after training stays open, and a member that asks again (its daemon
restarted) is offered it once more, to join and load its part again (``vflserver.training.served_again.terms``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from vflcore.errors import JobAborted, PermissionDenied
from vflcore.job.spec import Offer
from vflcore.runtime.config import DEFAULT_DATASET
from vflserver.federation.directory import PartyDirectory
from vflserver.federation.passive_parties import PassiveParties
from vflserver.federation.presence import PartyPresence

#: The states of a job's parties in which each party holds a session that a restart breaks.
IN_PROGRESS = frozenset({"waiting", "aligning", "training"})

#: The longest a NextJob call is held before an empty reply; a daemon asks again at once.
MAX_OFFER_WAIT_S = 60.0


class JobBoard:
    """The open job (if any), for the handlers; the offers, for the waiting daemons."""

    def __init__(self, presence: PartyPresence | None = None) -> None:
        #: The daemons connected now, by their NextJob calls.
        self.presence = presence or PartyPresence()
        #: Each party's daemon as last seen, for the operator's console (``vflserver.console``).
        self.directory = PartyDirectory()
        self._changed = threading.Condition()
        self._parties: PassiveParties | None = None
        self._datasets: dict[int, str] = {}
        self._models: dict[int, str] = {}
        self._shut = False

    @classmethod
    def single(cls, parties: PassiveParties, datasets: Mapping[int, str] | None = None) -> JobBoard:
        """A board with one job open for good: a server (or a test) that runs exactly one job."""
        board = cls()
        board.open(parties, datasets or {})
        return board

    def open(
        self, parties: PassiveParties, datasets: Mapping[int, str], models: Mapping[int, str] | None = None
    ) -> None:
        """Serve ``parties``' job from now on; waiting daemons that it names get its offer.

        ``datasets`` and ``models`` name, per party, the dataset and model factory of its own
        config that the job asks it to use (a party not listed: its default).
        """
        with self._changed:
            self._parties, self._datasets, self._models = parties, dict(datasets), dict(models or {})
            self._changed.notify_all()

    def close(self, parties: PassiveParties) -> None:
        """Stop serving ``parties``' job (a no-op if another job is open by now).

        Its online parties were connected until now: they stay so while they come back to NextJob.
        """
        for party in parties.members.online_parties():
            self.presence.seen(party)
        with self._changed:
            if self._parties is parties:
                self._parties, self._datasets, self._models = None, {}, {}
            self._changed.notify_all()

    def shut(self) -> None:
        """The server is stopping: every NextJob held now, or asked from now on, ends at once with no offer.

        Without this, ``grpc.Server.stop`` waited out its whole grace period for the long polls,
        which gRPC keeps active until it cancels them: most of the server's exit time after SIGTERM.
        """
        with self._changed:
            self._shut = True
            self._changed.notify_all()

    def current(self) -> PassiveParties | None:
        return self._parties

    def for_party(self, party: int) -> PassiveParties:
        """The open job, if it names ``party``.

        No job open: JobAborted (ABORTED). The call belongs to a run that has ended, or paused and
        not yet resumed (a party's upload racing the pause); the party drops its task and asks for
        the next job (NextJob). As FAILED_PRECONDITION the party reported it as its failure, and
        the resumed run failed on that report. A job that does not name the party:
        PermissionDenied, since this party may not touch that job's tensors at all.
        """
        parties = self._parties
        if parties is None:
            raise JobAborted(f"no job is running now; party {party} takes the next one (NextJob)")
        if party not in parties.job.passive_parties:
            raise PermissionDenied(
                f"party {party} is not a passive party of the running job {parties.job.job_id!r} "
                f"(it has parties {list(parties.job.passive_parties)})"
            )
        return parties

    def next_offer(self, party: int, wait_s: float, active: Callable[[], bool]) -> Offer | None:
        """The offer once a job that names ``party`` waits for it to join; None after ``wait_s``."""
        deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_OFFER_WAIT_S)
        self._restarted(party)
        with self.presence.polling(party), self._changed:
            while True:
                offer = self._offer_for(party)
                remaining = deadline - time.monotonic()
                if self._shut:
                    return None
                if offer is not None or remaining <= 0 or not active():
                    return offer
                self._changed.wait(min(remaining, 0.5))

    def connected(self, party: int) -> bool:
        """Whether ``party``'s daemon is connected: polling NextJob, or online in the open job."""
        parties = self._parties
        if parties is not None and party in parties.members.online_parties():
            return True
        return self.presence.connected(party)

    def _restarted(self, party: int) -> None:
        """A party that asks for a job while it takes part in one has lost its session: say so now.

        Its daemon restarted, or its connection broke and it reconnected. Waiting out the grace
        period for a stream that will never come back would only delay the job's resumption. A
        member of a served model is forgotten instead, so that it is offered the job to rejoin.
        """
        parties = self._parties
        if parties is None or party not in parties.job.passive_parties or not parties.members.member(party).joined:
            return
        if parties.rejoins.open:  # it comes back into the served model: offered the job again below
            parties.rejoins.forget_session(
                party, "it reconnected; the model serves again once it has joined and loaded its part"
            )
            return
        if parties.state not in IN_PROGRESS:
            return
        if parties.state == "waiting":  # nothing started yet: it simply joins again
            parties.members.unjoin(party)
        else:
            parties.liveness.lose(party, "it asked for a new job: its daemon restarted or its connection broke")

    def _offer_for(self, party: int) -> Offer | None:
        parties = self._parties
        if parties is None or party not in parties.job.passive_parties:
            return None
        member = parties.members.member(party)
        if parties.rejoins.open:  # a party that reconnected joins the served model again
            if member.joined or member.refused is not None:
                return None
        elif parties.state != "waiting" or member.joined or member.failure is not None:
            return None
        return Offer(parties.job, self._datasets.get(party, DEFAULT_DATASET), self._models.get(party, ""))

    def online(self) -> dict[int, bool]:
        """Party -> online, for the open job's parties (empty when no job is open)."""
        parties = self._parties
        if parties is None:
            return {}
        found = set(parties.members.online_parties())
        return {party: party in found for party in parties.job.passive_parties}
