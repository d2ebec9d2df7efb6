"""Run queued jobs one at a time, by the queue's rule, and record every step in the job store.

The runner is the only writer of a job's progress. For each job it reads the active party's
dataset, opens the job on the ``JobBoard`` (so that the passive daemons it names get its offer),
runs ``ActiveParty.run`` and writes each state change and each epoch to the store as it happens.
Whatever happens to a job, the runner goes on to the next one: a bad job fails alone.

Which job runs next is ``vflserver.jobs.scheduling``'s rule: the oldest whose passive parties
are all connected. A job paused for a lost party is parked in the ``JobQueue`` rather than waited
on, so it holds up no other job; a second thread (``_keep_time``) fails parked and queued jobs
whose time is up, and says in each held job's message which party it waits for.

A cancelled job stops within one training step: ``PassiveParties.abort`` wakes the step waiting
for a party's tensor, the job ends with ``JobAborted`` and every party is told to drop it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping

import structlog

from vflalgorithms.registry import algorithm_spec
from vflcore.absence import did_not_come_back
from vflcore.data.checkpoints import party_dir
from vflcore.data.tables import DataError, PartyTable
from vflcore.errors import ConfigError, DivergedServingBest, JobAborted, JobStateError, PartyLost, VflError
from vflcore.job import ACTIVE_PARTY
from vflcore.psi.progress import discard_all
from vflcore.runtime.config import ServerConfig
from vflcore.wire.traffic import MB
from vflserver.federation.alignment import AlignmentResult
from vflserver.federation.board import JobBoard
from vflserver.inference.federated import FederatedServable
from vflserver.inference.model_state import ModelState, model_state
from vflserver.inference.onnx_model import load_servable
from vflserver.inference.registry import ModelRegistry
from vflserver.jobs.job_queue import JobQueue, ParkedJob, saved_in_words
from vflserver.jobs.metrics import ServiceMetrics
from vflserver.jobs.plan import read_active_table, read_held_out
from vflserver.jobs.saved_models import serve_saved_models, serve_student
from vflserver.jobs.scheduling import loss_deadline
from vflserver.jobs.served_federated import serve_federated_again
from vflserver.jobs.store import ENDED, EpochRecord, JobRecord, JobStore
from vflserver.training.active_party import ActiveParty
from vflserver.training.job_plan import JobPlan
from vflserver.training.reports import EpochReport, RunSummary

log = structlog.get_logger(__name__)


class JobListener:
    """Hooks for a front end (``vfl-server`` prints them); every method may be left as is."""

    def aligned(self, job_id: str, result: AlignmentResult) -> None:
        """PSI is done for ``job_id``."""

    def epoch(self, job_id: str, report: EpochReport) -> None:
        """An epoch of ``job_id`` ended and was evaluated."""

    def ended(self, record: JobRecord, summary: RunSummary | None, active: ActiveParty | None) -> None:
        """``job_id`` ended (``record.state`` says how); ``summary`` is set if it finished."""


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
        self.registry, self.metrics = registry, metrics
        self.listener = listener or JobListener()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._active: ActiveParty | None = None  # the running job's active party
        self._cancels: dict[str, str] = {}  # job id -> who cancelled it, until its runner sees it
        self._serving: ActiveParty | None = None  # a federated model kept served after its job
        #: The queued and the parked jobs, and the rule for which starts next.
        self.queue = JobQueue(store, board, self.settings, self._lock, self._end)
        self._thread = threading.Thread(target=self._loop, name="job-runner", daemon=True)
        self._keeper = threading.Thread(target=self._keep_time, name="job-deadlines", daemon=True)
        board.presence.on_arrival(self.wake)  # a daemon that connects may let a held job start

    # ---- control ------------------------------------------------------------------------------

    def start(self) -> None:
        if self.registry is not None:
            federated = serve_saved_models(self.registry, self.store, self.settings.run_dir)
            args = (self.store, self.board, self.registry, self.datasets, self.settings)
            self._serving = serve_federated_again(federated, *args)  # after a crash; retired as the next job starts
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
                self._count_end("cancelled")
                return self.store.get(job_id)
            parked = self.queue.unpark(job_id)  # waiting for a party, off the runner
            if parked:
                self._end(job_id, "cancelled", f"cancelled by {by}")
            else:
                self._cancels[job_id] = by
            active = self._active
        if parked:
            log.info("job_cancel_requested", job=job_id, by=by)
            self.listener.ended(self.store.get(job_id), None, None)
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
        self._retire_served("the server is shutting down")

    # ---- the loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            picked = self._next_job()
            if picked is None:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            record, parked = picked
            self._retire_served(f"job {record.job_id} starts")
            try:
                self._run(record, parked)
            except Exception:  # never lose the runner: the next job must still run
                log.exception("runner_failed", job=record.job_id)
                try:
                    self._end(record.job_id, "failed", "internal error in the job runner; see the server log")
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
                self._discard_psi(job_id)
                self.listener.ended(self.store.get(job_id), None, None)

    def _interrupt_parked(self) -> None:
        """At shutdown: the parked jobs are interrupted, as a running one is, to resume at the next start."""
        with self._lock:
            parked = self.queue.take_parked()
        for job_id in parked:
            record = self.store.get(job_id)
            self._end(
                job_id,
                "interrupted",
                f"the server stopped during {record.state} after {record.epochs_done} of {record.epochs} epochs",
            )

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
                    self._end(job_id, "failed", str(exc))
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
                    self._end(job_id, "cancelled", f"cancelled by {cancelled_by}")
                    self.listener.ended(self.store.get(job_id), None, None)
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
            self._end(job_id, "failed", str(exc))
            return None
        with self._lock:
            self._active = active
            cancelled_by = self._cancels.get(job_id)
        if cancelled_by is not None or self._stopping.is_set():
            _abort(active, JobAborted(f"cancelled by {cancelled_by}" if cancelled_by else "shutting down"))
        serve_federated = (
            self.registry is not None
            and plan.serve
            and not plan.psi_only
            and algorithm_spec(plan.job.algorithm).active_half().needs_parties_to_predict
        )
        self.board.open(active.parties, plan.datasets, plan.models)
        summary: RunSummary | None = None
        paused: ParkedJob | None = None
        try:
            summary = active.run(
                join_timeout_s=join_timeout_s,
                late=late,
                on_aligned=lambda result: self._aligned(active, result),
                on_epoch=lambda report: self._epoch(active, report),
                on_warning=lambda message: self._warning(active, message),
                keep_serving=serve_federated,
                resume=resume,
            )
        except PartyLost as exc:
            if self._stopping.is_set() or job_id in self._cancels:
                self._failed(active, exc)
            else:
                deadline = loss_deadline(exc, self.settings.party_timeout_s, time.monotonic())
                paused = ParkedJob(plan, table, exc, deadline)
                self._wait_for(active, exc)
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
            if self._serving is not active:
                self.board.close(active.parties)
            if paused is None:
                self.listener.ended(self.store.get(job_id), summary, active)
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

    def _wait_for(self, active: ActiveParty, exc: PartyLost) -> None:
        """Record that the job waits for the lost party, naming it, the reason and the time limit."""
        job_id = active.job.job_id
        message = (
            f"waiting for party {exc.party}: {exc.reason}; the job resumes from the newest checkpoint every party "
            f"holds once it is back ({_last_saved(active)}), or fails if it is not back within "
            f"{self.settings.party_timeout_s:g} s of the loss ([server] party_timeout_s). Jobs that do not need "
            "it run meanwhile"
        )
        self.store.set_state(job_id, "waiting", message)
        algorithm = getattr(active, "algorithm", None)  # none before PSI has aligned the rows
        steps = len(algorithm.step_losses) if algorithm is not None else 0
        log.warning("job_waiting", job=job_id, party=exc.party, reason=exc.reason, steps_done=steps)

    # ---- what the job reports -----------------------------------------------------------------

    def _aligned(self, active: ActiveParty, result: AlignmentResult) -> None:
        job_id = active.job.job_id
        how = "reused a saved alignment" if result.reused else "PSI"
        if not active.psi_only:
            self.store.set_state(job_id, "training", f"{result.table.num_rows} common IDs ({how})")
        self.listener.aligned(job_id, result)

    def _epoch(self, active: ActiveParty, report: EpochReport) -> None:
        job_id = active.job.job_id
        record = EpochRecord(
            epoch=report.epoch,
            train_loss=report.train_loss,
            test_loss=report.test_loss,
            metrics=dict(report.metrics),
            seconds=report.seconds,
            wire_bytes=round(report.wire_mb * MB),
        )
        self.store.record_epoch(job_id, record)
        if self.metrics is not None:
            self.metrics.epoch_done(active.job.algorithm)
            phase = f"train {report.epoch}"
            for party, phases in active.parties.traffic.report().items():
                counts = phases.get(phase, {})
                self.metrics.wire_bytes(party, "sent", counts.get("sent", 0))
                self.metrics.wire_bytes(party, "received", counts.get("received", 0))
        self.listener.epoch(job_id, report)

    def _warning(self, active: ActiveParty, message: str) -> None:
        """A warning about the running job (its test loss far past its best): an event, the job goes on."""
        self.store.record_warning(active.job.job_id, message)

    def _failed(self, active: ActiveParty, exc: BaseException) -> None:
        job_id = active.job.job_id
        with self._lock:
            cancelled_by = self._cancels.get(job_id)
        if cancelled_by is not None:
            self._end(job_id, "cancelled", f"cancelled by {cancelled_by}")
        elif self._stopping.is_set():
            record = self.store.get(job_id)
            self._end(
                job_id,
                "interrupted",
                f"the server stopped during {record.state} after {record.epochs_done} of {record.epochs} epochs",
            )
        else:
            log.error("job_failed", job=job_id, error=str(exc))
            self._end(job_id, "failed", str(exc) or type(exc).__name__)

    def _finished(self, active: ActiveParty, plan: JobPlan, summary: RunSummary, serve_federated: bool) -> None:
        """Serve the model first, then record the job finished: whoever sees it finished can query it."""
        job_id = active.job.job_id
        try:
            self._serve(active, plan, summary, serve_federated)
        except (VflError, OSError, ValueError) as exc:  # the job still finished; only serving failed
            log.warning("model_not_served", job=job_id, error=str(exc))
        message = "aligned IDs written" if plan.psi_only else "trained and evaluated"
        if summary.diverged is not None and summary.best_epoch is not None:
            message = f"training diverged; the best epoch by validation ({summary.best_epoch + 1}) was served"
        if summary.student is not None:  # first: the job's own metrics follow the message in every listing
            message = f"student {summary.student.job_id} distilled{_metrics_in_words(summary.student)}; {message}"
            self.store.set_student_metrics(job_id, summary.student.final_metrics)  # vfl-jobs show, in full
        self._end(job_id, "finished", message, final_metrics=summary.final_metrics)

    def _serve(self, active: ActiveParty, plan: JobPlan, summary: RunSummary, serve_federated: bool) -> None:
        job_id = active.job.job_id
        if self.registry is not None and plan.serve:
            if summary.student is not None:  # alone, whatever the job's own model needs
                serve_student(self.registry, job_id, summary.student.artifact)
            if summary.artifact is not None:
                self.registry.add(load_servable(summary.artifact, name=job_id))
                self.store.set_served(job_id, True)
                log.info("model_served", job=job_id, how="standalone artifact")
            elif serve_federated:
                try:
                    self.registry.add(FederatedServable(active, name=job_id, degraded=plan.degraded))
                except ValueError:  # not served: its parties, kept for it, may leave
                    active.shutdown("the model could not be served")
                    raise
                self.store.set_served(job_id, True)
                self._serving = active
                log.info("model_served", job=job_id, how="federated, until the next job starts")

    def _end(self, job_id: str, state: str, message: str, *, final_metrics: Mapping[str, float] | None = None) -> None:
        self.store.set_state(job_id, state, message, final_metrics=final_metrics)
        self._count_end(state)
        if state != "interrupted":  # an interrupted job resumes at the next start, its PSI too
            self._discard_psi(job_id)
        log.info("job_ended", job=job_id, state=state, message=message)

    def _discard_psi(self, job_id: str) -> None:
        """The job is over for good: a PSI exchange it left unfinished will not resume, so its secrets go."""
        discard_all(party_dir(self.settings.run_dir, job_id, ACTIVE_PARTY) / "psi")

    def _count_end(self, state: str) -> None:
        if self.metrics is not None:
            self.metrics.job_ended(state)

    # ---- serving ------------------------------------------------------------------------------

    def _retire_served(self, why: str) -> None:
        """End the federated model kept served after its job: its parties are needed elsewhere."""
        active, self._serving = self._serving, None
        if active is None:
            return
        job_id = active.job.job_id
        if self.registry is not None:
            with contextlib.suppress(VflError):  # already gone
                self.registry.remove(job_id)
        active.shutdown(f"the model is no longer served: {why}")
        self.board.close(active.parties)
        self.store.set_served(job_id, False)
        log.info("model_unserved", job=job_id, why=why)

    def model_state(self, job_id: str) -> ModelState | None:
        """What ``job_id``'s served model can do now (serving, degraded, waiting for a party); None if not served."""
        if self.registry is None:
            return None
        try:
            return model_state(self.registry.get(job_id).servable)
        except LookupError:  # ModelNotFound: not served
            return None

    def model_states(self) -> list[ModelState]:
        """The state of every served model, for the metrics."""
        return [model_state(entry.servable) for entry in self.registry.models()] if self.registry is not None else []


def _metrics_in_words(student: RunSummary) -> str:
    """`` (accuracy 0.9133, the active party alone)``: the student's held-out metrics, for the job's final message."""
    shown = {name: value for name, value in student.final_metrics.items() if name in ("accuracy", "r2", "auc")}
    if not shown:
        return ""
    return f" ({', '.join(f'{name} {value:.4f}' for name, value in shown.items())}, the active party alone)"


def _last_saved(active: ActiveParty) -> str:
    """The newest epoch the active party saved, in words, for messages about a paused job."""
    return saved_in_words(active.settings.run_dir, active.job.job_id)


def _abort(active: ActiveParty, reason: JobAborted) -> None:
    """Make a running job end at its next wait: the loop's stop flag and every waiting exchange."""
    active.stop_event.set()
    active.parties.abort(reason)
