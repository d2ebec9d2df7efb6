"""Run queued jobs one at a time, by the queue's rule, and stop, cancel or park them.

The runner decides what happens to each job. For each it reads the active party's dataset,
opens the job on the ``JobBoard`` (so that the passive daemons it names get its offer) and runs
``ActiveParty.run``; what happens is written down by ``JobProgress`` (the store, the metrics,
the listener), and a finished model is served by ``ModelServing``. Whatever happens to a job,
the runner goes on to the next one: a bad job fails alone.

Which job runs next is ``vflserver.jobs.scheduling``'s rule: the oldest whose passive parties
are all connected. A job paused for a lost party is parked in the ``JobQueue`` rather than waited
on, so it holds up no other job; a second thread (``_keep_time``) fails parked and queued jobs
whose time is up, and says in each held job's message which party it waits for.

A cancelled job stops within one training step: ``PassiveParties.abort`` wakes the step waiting
for a party's tensor, the job ends with ``JobAborted`` and every party is told to drop it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from vflcore.absence import did_not_come_back
from vflcore.data.tables import DataError, PartyTable
from vflcore.errors import ConfigError, DivergedServingBest, JobAborted, JobStateError, PartyLost, VflError
from vflcore.runtime.config import ServerConfig
from vflserver.federation.board import JobBoard
from vflserver.inference.registry import ModelRegistry
from vflserver.jobs.job_queue import JobQueue, ParkedJob, saved_in_words
from vflserver.jobs.metrics import ServiceMetrics
from vflserver.jobs.progress import JobListener, JobProgress
from vflserver.jobs.scheduling import loss_deadline
from vflserver.jobs.serving import ModelServing
from vflserver.jobs.store import ENDED, JobRecord, JobStore
from vflserver.plan.admission import read_active_table, read_held_out
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
from vflserver.training.reports import RunSummary

log = structlog.get_logger(__name__)

#: How often the time keeper looks at the parked and queued jobs.
KEEPER_INTERVAL_S = 0.5


class JobRunner:
    """The one thread that runs jobs; ``wake`` it after a submission, ``cancel`` and ``stop`` any time."""

    def __init__(
        self,
        store: JobStore,
        board: JobBoard,
        config: ServerConfig,
        *,
        registry: ModelRegistry | None = None,
        metrics: ServiceMetrics | None = None,
        listener: JobListener | None = None,
    ) -> None:
        self.store, self.board = store, board
        #: The datasets jobs may name, and the settings every job runs under (``ServerSettings``).
        self.datasets, self.settings = config.datasets, config.settings
        #: What is written down about each job: the store, the metrics, the listener.
        self.progress = JobProgress(store, self.settings, metrics=metrics, listener=listener)
        #: The models finished jobs left served, and the federated one kept after its job.
        self.serving = ModelServing(store, board, registry, self.datasets, self.settings)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._active: ActiveParty | None = None  # the running job's active party
        self._cancels: dict[str, str] = {}  # job id -> who cancelled it, until its runner sees it
        #: The queued and the parked jobs, and the rule for which starts next.
        self.queue = JobQueue(store, board, self.settings, self._lock, self.progress.end)
        self._thread = threading.Thread(target=self._loop, name="job-runner", daemon=True)
        self._keeper = threading.Thread(target=self._keep_time, name="job-deadlines", daemon=True)
        board.presence.on_arrival(self.wake)  # a daemon that connects may let a held job start

    # ---- control ------------------------------------------------------------------------------

    def start(self) -> None:
        self.serving.start()
        self._thread.start()
        self._keeper.start()

    def submitted(self, plan: JobPlan) -> None:
        """A job was queued with ``plan`` (checked at submission): keep the plan for its run, and look now."""
        with self._lock:
            self.queue.remember(plan)
        self.wake()

    def wake(self) -> None:
        """A job was queued: look at the queue now rather than at the next poll."""
        self._wake.set()

    def cancel(self, job_id: str, by: str) -> JobRecord:
        """Cancel a queued job at once, or a running one within one training step."""
        with self._lock:
            record = self.store.get(job_id)
            if record.state in ENDED:
                raise JobStateError(f"job {job_id!r} has already ended ({record.state}); there is nothing to cancel")
            if record.state == "queued":
                self.store.set_state(job_id, "cancelled", f"cancelled by {by} before it started")
                self.progress.count_end("cancelled")
                return self.store.get(job_id)
            parked = self.queue.unpark(job_id)  # waiting for a party, off the runner
            if parked:
                self.progress.end(job_id, "cancelled", f"cancelled by {by}")
            else:
                self._cancels[job_id] = by
            active = self._active
        if parked:
            log.info("job_cancel_requested", job=job_id, by=by)
            self.progress.ended(job_id)
            return self.store.get(job_id)
        if active is not None and active.job.job_id == job_id:
            _abort(active, JobAborted(f"cancelled by {by}"))
        log.info("job_cancel_requested", job=job_id, by=by)
        return self.store.get(job_id)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the running job (interrupted now, to resume later); stop serving its parties."""
        self._stopping.set()
        self._wake.set()
        with self._lock:
            active = self._active
        if active is not None:
            _abort(active, JobAborted("the server is shutting down"))
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self.serving.retire("the server is shutting down")

    # ---- the loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            picked = self._next_job()
            if picked is None:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            record, parked = picked
            self.serving.retire(f"job {record.job_id} starts")
            try:
                self._run(record, parked)
            except Exception:  # never lose the runner: the next job must still run
                log.exception("runner_failed", job=record.job_id)
                try:
                    self.progress.end(record.job_id, "failed", "internal error in the job runner; see the server log")
                except JobStateError:  # it had ended already (cancelled meanwhile): nothing to record
                    log.warning("runner_end_skipped", job=record.job_id, state=self.store.get(record.job_id).state)
        self._interrupt_parked()

    def _next_job(self) -> tuple[JobRecord, ParkedJob | None] | None:
        with self._lock:
            return self.queue.next_job()

    def _keep_time(self) -> None:
        """Fail the held jobs whose time is up, and keep each held job's message true, until stopped."""
        while not self._stopping.wait(KEEPER_INTERVAL_S):
            try:
                ended = self.queue.expire()
            except Exception:  # a store that closed under it at shutdown, say: try again next time
                if not self._stopping.is_set():
                    log.exception("deadline_check_failed")
                continue
            for job_id in ended:
                self.progress.discard_psi(job_id)
                self.progress.ended(job_id)

    def _interrupt_parked(self) -> None:
        """At shutdown: the parked jobs are interrupted, as a running one is, to resume at the next start."""
        with self._lock:
            parked = self.queue.take_parked()
        for job_id in parked:
            self.progress.interrupted(job_id)

    # ---- one job ------------------------------------------------------------------------------

    def _run(self, record: JobRecord, parked: ParkedJob | None = None) -> None:
        """Run one attempt of a job: to its end, or until a lost party parks it (``ParkedJob``).

        Each attempt is a fresh ``ActiveParty`` on the board. A job that ran before (this server
        restarted) and a parked job resume from the newest checkpoint that every party holds; a
        job that never ran starts afresh.
        """
        job_id = record.job_id
        structlog.contextvars.bind_contextvars(job=job_id)
        try:
            if parked is None:
                try:
                    with self._lock:
                        plan = self.queue.plan_to_run(record)
                    table = read_active_table(plan, self.datasets)
                except (ConfigError, DataError, ValueError) as exc:
                    self.progress.end(job_id, "failed", str(exc))
                    return
                paused = self._attempt(plan, table, resume=record.started_at is not None, lost=None)
            else:
                paused = self._attempt(parked.plan, parked.table, resume=True, lost=parked)
            if paused is not None:
                with self._lock:
                    cancelled_by = self._cancels.pop(job_id, None)
                    if cancelled_by is None:
                        self.queue.park(job_id, paused)
                if cancelled_by is not None:  # cancelled while it was being parked
                    self.progress.end(job_id, "cancelled", f"cancelled by {cancelled_by}")
                    self.progress.ended(job_id)
        finally:
            structlog.contextvars.unbind_contextvars("job")

    def _attempt(self, plan: JobPlan, table: PartyTable, *, resume: bool, lost: ParkedJob | None) -> ParkedJob | None:
        """One run of the job's ``ActiveParty``; returns the job parked if a party was lost."""
        job_id = plan.job.job_id
        parties = list(plan.job.passive_parties)
        late: Callable[[list[int]], Exception] | None = None
        if lost is None:
            then = "resume from the newest checkpoint" if resume else "PSI"
            with self._lock:  # as ``cancel`` does: a job cancelled while it was still queued never starts
                state = self.store.get(job_id).state
                if state in ENDED:
                    log.info("job_not_started", job=job_id, state=state)
                    return None
                self.store.set_state(job_id, "aligning", f"waiting for parties {parties}, then {then}")
            join_timeout_s = plan.join_timeout_s
        else:
            # Its parties were connected when it was picked, so they join at once, as for a new job.
            join_timeout_s = plan.join_timeout_s
            late = self._late_rejoin(job_id, lost, join_timeout_s)
        try:
            active = ActiveParty(plan, table, self.settings, held_out=read_held_out(plan, self.datasets))
        except (ConfigError, DataError, ValueError) as exc:
            self.progress.end(job_id, "failed", str(exc))
            return None
        with self._lock:
            self._active = active
            cancelled_by = self._cancels.get(job_id)
        if cancelled_by is not None or self._stopping.is_set():
            _abort(active, JobAborted(f"cancelled by {cancelled_by}" if cancelled_by else "shutting down"))
        serve_federated = self.serving.federated(plan)
        self.board.open(active.parties, plan.datasets, plan.models)
        summary: RunSummary | None = None
        paused: ParkedJob | None = None
        try:
            summary = active.run(
                join_timeout_s=join_timeout_s,
                late=late,
                on_aligned=lambda result: self.progress.aligned(active, result),
                on_epoch=lambda report: self.progress.epoch(active, report),
                on_warning=lambda message: self.progress.warning(active, message),
                keep_serving=serve_federated,
                resume=resume,
            )
        except PartyLost as exc:
            if self._stopping.is_set() or job_id in self._cancels:
                self._failed(active, exc)
            else:
                deadline = loss_deadline(exc, self.settings.party_timeout_s, time.monotonic())
                paused = ParkedJob(plan, table, exc, deadline)
                self.progress.waiting(active, exc)
        except DivergedServingBest as exc:
            if self._stopping.is_set() or job_id in self._cancels:
                self._failed(active, exc)
            else:  # its parties are connected: the job resumes at once, to serve the best epoch
                left = PartyLost(parties[0], "it left the job when training diverged", since=time.monotonic())
                paused = ParkedJob(
                    plan, table, left, loss_deadline(left, self.settings.party_timeout_s, time.monotonic())
                )
                self.store.set_state(job_id, "waiting", str(exc))
                self.store.record_warning(job_id, exc.diverged)
                log.warning("job_serving_best", job=job_id, best=exc.best)
        except BaseException as exc:
            self._failed(active, exc)
        else:
            self._finished(active, plan, summary, serve_federated)
        finally:
            with self._lock:
                self._active = None
                if paused is None:
                    self._cancels.pop(job_id, None)
            if not self.serving.keeps(active):
                self.board.close(active.parties)
            if paused is None:
                self.progress.ended(job_id, summary, active)
        return paused

    def _late_rejoin(self, job_id: str, lost: ParkedJob, wait_s: float) -> Callable[[list[int]], Exception]:
        """What a resumed job raises when a connected party did not join it within ``wait_s``.

        Before the loss's deadline the party is lost again (the job is parked once more, with the
        same deadline); after it, the job fails with the words the time keeper would use.
        """

        def late(missing: list[int]) -> Exception:
            if time.monotonic() < lost.deadline:
                reason = f"it was connected, but did not join the resumed job within {wait_s:g} s"
                return PartyLost(missing[0], reason, since=lost.deadline - self.settings.party_timeout_s)
            saved = saved_in_words(self.settings.run_dir, job_id)
            return did_not_come_back(missing[0], self.settings.party_timeout_s, lost.lost.reason, saved)

        return late

    def _failed(self, active: ActiveParty, exc: BaseException) -> None:
        job_id = active.job.job_id
        with self._lock:
            cancelled_by = self._cancels.get(job_id)
        if cancelled_by is not None:
            self.progress.end(job_id, "cancelled", f"cancelled by {cancelled_by}")
        elif self._stopping.is_set():
            self.progress.interrupted(job_id)
        else:
            log.error("job_failed", job=job_id, error=str(exc))
            self.progress.end(job_id, "failed", str(exc) or type(exc).__name__)

    def _finished(self, active: ActiveParty, plan: JobPlan, summary: RunSummary, serve_federated: bool) -> None:
        """Serve the model first, then record the job finished: whoever sees it finished can query it."""
        try:
            self.serving.serve(active, plan, summary, serve_federated)
        except (VflError, OSError, ValueError) as exc:  # the job still finished; only serving failed
            log.warning("model_not_served", job=active.job.job_id, error=str(exc))
        self.progress.finished(plan, summary)


def _abort(active: ActiveParty, reason: JobAborted) -> None:
    """Make a running job end at its next wait: the loop's stop flag and every waiting exchange."""
    active.stop_event.set()
    active.parties.abort(reason)
