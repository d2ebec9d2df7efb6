"""The jobs that wait for the runner or for their parties: the queued ones and the parked ones.

``JobRunner`` asks ``next_job`` whenever it is free, and its time keeper calls ``expire`` every
half second; both apply ``vflserver.jobs.scheduling``'s rule to what the store and the board
say now. A job paused for a lost party is parked here (``ParkedJob``: its plan, its table and
the loss) instead of holding the runner, and is handed back to it once its parties are
connected again. The runner's lock guards everything here, so that a cancel, a pick and an
expiry never act on the same job at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from vflcore.absence import did_not_come_back, did_not_connect
from vflcore.data.checkpoints import checkpoint_positions, party_dir
from vflcore.data.tables import PartyTable
from vflcore.errors import ConfigError, PartyLost
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.runtime.config import ServerSettings
from vflserver.federation.board import JobBoard
from vflserver.jobs.scheduling import CONNECTED_MESSAGE, Candidate, absent_since, next_turn, waiting_message
from vflserver.jobs.store import JobRecord, JobStore
from vflserver.plan.document import plan_from_document
from vflserver.plan.job_plan import JobPlan

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ParkedJob:
    """A job paused for a lost party, off the runner until its parties are connected again."""

    plan: JobPlan
    table: PartyTable
    lost: PartyLost
    #: ``time.monotonic()`` after which it fails while a party it needs is still not connected.
    deadline: float


#: Records a job's end: (job id, state, message); ``JobProgress.end``.
EndJob = Callable[[str, str, str], None]


class JobQueue:
    """Queued and parked jobs, in submission order; ``lock`` is the runner's."""

    def __init__(
        self, store: JobStore, board: JobBoard, settings: ServerSettings, lock: threading.Lock, end: EndJob
    ) -> None:
        self.store, self.board, self.settings = store, board, settings
        self._lock = lock
        self._end = end
        self._parked: dict[str, ParkedJob] = {}
        #: Queued job id -> its plan (None: its document no longer reads) and when it was first seen queued.
        self._plans: dict[str, tuple[JobPlan | None, float]] = {}
        #: The job ``next_job`` picked -> its plan, until the runner takes it (``plan_to_run``).
        self._picked: dict[str, JobPlan] = {}
        #: Queued job id -> the parties its latest message says it waits for.
        self._held: dict[str, tuple[int, ...]] = {}

    # ---- the runner's side (call with the lock held) -------------------------------------------

    def remember(self, plan: JobPlan) -> None:
        """The plan of a job just submitted, made and checked at submission: its run uses it as is."""
        self._plans[plan.job.job_id] = (plan, time.monotonic())

    def plan_to_run(self, record: JobRecord) -> JobPlan:
        """The plan of the job ``next_job`` picked: the one made at submission, or, after a restart of
        this server, made again from the stored document (a ConfigError says why it no longer reads)."""
        known = self._picked.pop(record.job_id, None)
        if known is not None:
            return known
        return plan_from_document(
            record.document, default_join_timeout_s=self.settings.join_timeout_s, job_id=record.job_id
        )

    def next_job(self) -> tuple[JobRecord, ParkedJob | None] | None:
        """The job to run now (``scheduling.next_turn``): its record, and its parked state if it was parked."""
        records = [
            r
            for r in reversed(self.store.list(states=("queued", "waiting")))
            if r.state == "queued" or r.job_id in self._parked
        ]
        turn = next_turn([Candidate(r.job_id, self._parties_of(r)) for r in records], self.board.connected)
        if turn.start is None:
            return None
        record = next(r for r in records if r.job_id == turn.start.job_id)
        plan = self._plans.get(record.job_id, (None, 0.0))[0]
        if plan is not None:
            self._picked[record.job_id] = plan
        self._forget(record.job_id)
        return record, self._parked.pop(record.job_id, None)

    def park(self, job_id: str, parked: ParkedJob) -> None:
        self._parked[job_id] = parked

    def unpark(self, job_id: str) -> bool:
        """Take a parked job out (it was cancelled); False if it is not parked."""
        return self._parked.pop(job_id, None) is not None

    def take_parked(self) -> list[str]:
        """Every parked job, taken out (the server stops: they are interrupted)."""
        parked, self._parked = list(self._parked), {}
        return parked

    # ---- the time keeper's side ------------------------------------------------------------

    def expire(self) -> list[str]:
        """Fail the parked and queued jobs whose time is up; keep each held job's message true.

        Returns the ids of the jobs it ended.
        """
        ended: list[str] = []
        now = time.monotonic()
        with self._lock:
            for job_id, parked in list(self._parked.items()):
                if self._parked_too_long(job_id, parked, now):
                    ended.append(job_id)
            queued = self.store.list(states=("queued",))
            for record in queued:
                if self._held_too_long(record, now):
                    ended.append(record.job_id)
            for gone in set(self._plans) - {r.job_id for r in queued}:  # started or cancelled meanwhile
                self._forget(gone)
        return ended

    def _parked_too_long(self, job_id: str, parked: ParkedJob, now: float) -> bool:
        missing = [p for p in parked.plan.job.passive_parties if not self.board.connected(p)]
        if not missing or now < parked.deadline:
            return False
        del self._parked[job_id]
        lost = parked.lost
        party = lost.party if lost.party in missing else missing[0]
        saved = saved_in_words(self.settings.run_dir, job_id)
        exc = did_not_come_back(party, self.settings.party_timeout_s, lost.reason, saved)
        log.error("job_failed", job=job_id, error=str(exc))
        self._end(job_id, "failed", str(exc))
        return True

    def _held_too_long(self, record: JobRecord, now: float) -> bool:
        """Say which parties a queued job waits for; fail it (True) once one was away for its join limit."""
        job_id = record.job_id
        plan = self._plan(record)
        if plan is None:
            return False  # the runner fails it as soon as it is free
        queued_at = self._plans[job_id][1]
        missing = tuple(p for p in plan.job.passive_parties if not self.board.connected(p))
        announced = job_id in self._held  # its history says whom it waits for before it fails for them
        for party in missing if announced else ():
            if now - absent_since(queued_at, self.board.presence.last_seen(party)) >= plan.join_timeout_s:
                exc = did_not_connect(party, plan.join_timeout_s)
                log.error("job_failed", job=job_id, error=str(exc))
                self._end(job_id, "failed", str(exc))
                self._forget(job_id)
                return True
        if missing != self._held.get(job_id, ()):
            self.store.set_state(job_id, "queued", waiting_message(missing) if missing else CONNECTED_MESSAGE)
            if missing:
                log.info("job_held", job=job_id, parties=list(missing))
                self._held[job_id] = missing
            else:
                self._held.pop(job_id, None)
        return False

    # ---- what is known of each job ---------------------------------------------------------

    def _parties_of(self, record: JobRecord) -> tuple[int, ...]:
        """The passive parties a job needs; none for a job whose document no longer reads (it fails at once)."""
        parked = self._parked.get(record.job_id)
        if parked is not None:
            return tuple(parked.plan.job.passive_parties)
        plan = self._plan(record)
        return () if plan is None else tuple(plan.job.passive_parties)

    def _plan(self, record: JobRecord) -> JobPlan | None:
        """A queued job's plan, read once; the time it was first seen queued is kept beside it."""
        known = self._plans.get(record.job_id)
        if known is None:
            try:
                plan: JobPlan | None = plan_from_document(
                    record.document, default_join_timeout_s=self.settings.join_timeout_s, job_id=record.job_id
                )
            except (ConfigError, ValueError):
                plan = None
            known = self._plans[record.job_id] = (plan, time.monotonic())
        return known[0]

    def _forget(self, job_id: str) -> None:
        self._plans.pop(job_id, None)
        self._held.pop(job_id, None)


def saved_in_words(run_dir: Path, job_id: str) -> str:
    """The newest checkpoint the active party saved for ``job_id``, in words, for messages about a paused job."""
    saved = checkpoint_positions(party_dir(run_dir, job_id, ACTIVE_PARTY))
    return f"the last checkpoint saved is at {saved[-1]}" if saved else "no checkpoint has been saved yet"
