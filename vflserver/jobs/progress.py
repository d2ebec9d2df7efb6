"""What the job store, the metrics and the front end are told about a job as it runs, in words.

The runner decides what happens to a job; this module writes it down: each state change with
its message (PSI done, waiting for a lost party, finished, failed, interrupted), each epoch
(with its bytes on the wire per party, for the metrics), a warning, and a job's end, which is
counted in the metrics and, unless the job is only interrupted, discards its unfinished PSI.
``JobListener`` is the front end's hook on the same events (``vfl-server`` prints them).
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from vflcore.data.checkpoints import party_dir
from vflcore.errors import PartyLost
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.psi.progress import discard_all
from vflcore.runtime.config import ServerSettings
from vflcore.wire.traffic import MB
from vflserver.federation.alignment import AlignmentResult
from vflserver.jobs.job_queue import saved_in_words
from vflserver.jobs.metrics import ServiceMetrics
from vflserver.jobs.store import EpochRecord, JobRecord, JobStore
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
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


class JobProgress:
    """Writes a job's states, epochs, warnings and end to the store, the metrics and the listener."""

    def __init__(
        self,
        store: JobStore,
        settings: ServerSettings,
        *,
        metrics: ServiceMetrics | None = None,
        listener: JobListener | None = None,
    ) -> None:
        self.store, self.settings, self.metrics = store, settings, metrics
        self.listener = listener or JobListener()

    def aligned(self, active: ActiveParty, result: AlignmentResult) -> None:
        job_id = active.job.job_id
        how = "reused a saved alignment" if result.reused else "PSI"
        if not active.psi_only:
            self.store.set_state(job_id, "training", f"{result.table.num_rows} common IDs ({how})")
        self.listener.aligned(job_id, result)

    def epoch(self, active: ActiveParty, report: EpochReport) -> None:
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

    def warning(self, active: ActiveParty, message: str) -> None:
        """A warning about the running job (its test loss far past its best): an event, the job goes on."""
        self.store.record_warning(active.job.job_id, message)

    def waiting(self, active: ActiveParty, exc: PartyLost) -> None:
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

    def interrupted(self, job_id: str) -> None:
        """The server stopped while the job was under way: it resumes at the next start."""
        record = self.store.get(job_id)
        self.end(
            job_id,
            "interrupted",
            f"the server stopped during {record.state} after {record.epochs_done} of {record.epochs} epochs",
        )

    def finished(self, plan: JobPlan, summary: RunSummary) -> None:
        """Record the job finished, saying what it made (a student, the best epoch served after a divergence)."""
        job_id = plan.job.job_id
        message = "aligned IDs written" if plan.psi_only else "trained and evaluated"
        if summary.diverged is not None and summary.best_epoch is not None:
            message = f"training diverged; the best epoch by validation ({summary.best_epoch + 1}) was served"
        if summary.student is not None:  # first: the job's own metrics follow the message in every listing
            message = f"student {summary.student.job_id} distilled{_metrics_in_words(summary.student)}; {message}"
            self.store.set_student_metrics(job_id, summary.student.final_metrics)  # vfl-jobs show, in full
        self.end(job_id, "finished", message, final_metrics=summary.final_metrics)

    def end(self, job_id: str, state: str, message: str, *, final_metrics: Mapping[str, float] | None = None) -> None:
        self.store.set_state(job_id, state, message, final_metrics=final_metrics)
        self.count_end(state)
        if state != "interrupted":  # an interrupted job resumes at the next start, its PSI too
            self.discard_psi(job_id)
        log.info("job_ended", job=job_id, state=state, message=message)

    def ended(self, job_id: str, summary: RunSummary | None = None, active: ActiveParty | None = None) -> None:
        """Tell the listener the job ended, as the store now has it."""
        self.listener.ended(self.store.get(job_id), summary, active)

    def discard_psi(self, job_id: str) -> None:
        """The job is over for good: a PSI exchange it left unfinished will not resume, so its secrets go."""
        discard_all(party_dir(self.settings.run_dir, job_id, ACTIVE_PARTY) / "psi")

    def count_end(self, state: str) -> None:
        if self.metrics is not None:
            self.metrics.job_ended(state)


def _metrics_in_words(student: RunSummary) -> str:
    """`` (accuracy 0.9133, the active party alone)``: the student's held-out metrics, for the job's final message."""
    shown = {name: value for name, value in student.final_metrics.items() if name in ("accuracy", "r2", "auc")}
    if not shown:
        return ""
    return f" ({', '.join(f'{name} {value:.4f}' for name, value in shown.items())}, the active party alone)"


def _last_saved(active: ActiveParty) -> str:
    """The newest epoch the active party saved, in words, for messages about a paused job."""
    return saved_in_words(active.settings.run_dir, active.job.job_id)
