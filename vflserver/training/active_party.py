"""The active party: it owns the labels, drives the job, evaluates, and scores rows by ID.

``ActiveParty.run`` is the whole job as the label holder sees it: wait for every passive party,
train epoch by epoch through the configured algorithm, evaluate on the held-out rows after each
epoch, checkpoint, and finally run federated inference on the held-out rows. The gRPC handlers
never touch this class directly; they talk to its ``PassiveParties``. Its other jobs live beside
it: checkpoints and resumption (``resume``), scoring for the inference endpoint (``scoring``),
the model files (``export``) and the reports (``reports``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import structlog
import torch

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.factories import resolve_factories
from vflalgorithms.halves import ServerAlgorithm
from vflalgorithms.registry import algorithm_spec
from vflcore.data.checkpoints import party_dir
from vflcore.data.held_out import HeldOutIds
from vflcore.data.tables import PartyTable, select_rows, write_aligned_ids
from vflcore.errors import (
    CheckpointError,
    ConfigError,
    DivergedServingBest,
    JobAborted,
    PartyLost,
    TrainingDiverged,
)
from vflcore.job.distill import DistillSpec
from vflcore.job.schedule import Position, Schedule, mid_epoch_checkpoint_due, round_score_due
from vflcore.job.spec import ACTIVE_PARTY, new_job_id
from vflcore.ml.losses import label_tensor
from vflcore.ml.models import seed_dropout
from vflcore.runtime.config import ServerSettings
from vflcore.runtime.daemon import adopt_torch_threads
from vflcore.wire.traffic import MB
from vflcore.work_items import Checkpoint, HoldOut, Restore
from vflserver.federation.alignment import AlignmentResult, align_active
from vflserver.federation.passive_parties import PassiveParties
from vflserver.plan.job_plan import JobPlan
from vflserver.training.aligned_predictions import BLOCK_ROWS, AlignedPredictor
from vflserver.training.best_epoch import BestEpoch
from vflserver.training.distillation import Distillation
from vflserver.training.divergence import (
    StepPosition,
    TestLossWatch,
    best_to_serve,
    forget,
    located,
    remember,
    remembered,
)
from vflserver.training.evaluation import Evaluation
from vflserver.training.export import MODEL_REPOSITORY, export_model
from vflserver.training.importance import write_client_importance
from vflserver.training.reports import EpochReport, RunSummary, split_summary, write_summary
from vflserver.training.resume import load_newest, roll_back, save_checkpoint
from vflserver.training.served_again.readmission import Readmission
from vflserver.training.served_again.saved_terms import NotServableAgain, read_served, write_served
from vflserver.training.student import student_factory
from vflserver.training.table_fit import table_outputs
from vflserver.training.training_labels import labels_to_train_on

#: Names that lived here before the active party's jobs were split into modules.
__all__ = ["MODEL_REPOSITORY", "ActiveParty", "EpochReport", "RunSummary"]

log = structlog.get_logger(__name__)


class ActiveParty:
    """The label holder's side of one job.

    ``plan`` is the job's own (``vflserver.plan.job_plan``): the job, the default top's
    shape, the factories of its own models, whether it only aligns IDs, and its student; it was
    checked when it was made. ``settings`` are the server's (``[server]``, ``[psi]``,
    ``[compute]``). ``table`` is read when the job starts, so what depends on it (the classes, the
    feature columns) is checked here. ``held_out`` is the dataset's own test IDs (its
    ``held_out_ids`` file), if it names them. ``offline_grace_s`` is how long a passive party may
    be gone before inference stops waiting for it.
    """

    def __init__(
        self,
        plan: JobPlan,
        table: PartyTable,
        settings: ServerSettings | None = None,
        *,
        held_out: HeldOutIds | None = None,
        offline_grace_s: float = 5.0,
    ) -> None:
        settings = settings or ServerSettings()
        job = plan.job if plan.job.job_id else replace(plan.job, job_id=new_job_id())
        algorithm = algorithm_spec(job.algorithm).active_half()
        if not plan.psi_only:
            job = replace(job, num_outputs=table_outputs(job, table, algorithm, plan.distill))
        #: The job's plan, checked when it was made (at submission): this party trusts it.
        self.plan = plan
        #: The job's own model factories, imported (checked and probed at submission already).
        self.factories = resolve_factories(plan.factories, job.algorithm, algorithm.factory_keys)
        #: ``[distill]``: train a student on this party's features after the federated model (None: no).
        self.distill = None if plan.psi_only else plan.distill
        self.student_factory = student_factory(self.distill)
        self.device = torch.device(settings.device)
        self.job = job
        self.own_table = table
        self.held_out = held_out
        self.settings = settings
        self.psi_only = plan.psi_only
        self.parties = PassiveParties(
            self.job,
            step_timeout_s=settings.step_timeout_s,
            offline_grace_s=offline_grace_s,
            heartbeat_timeout_s=settings.heartbeat_timeout_s,
        )
        self.run_dir = party_dir(settings.run_dir, self.job.job_id, ACTIVE_PARTY)
        self.repository_root = settings.run_dir / MODEL_REPOSITORY
        self.stop_event = threading.Event()
        #: Set once every passive party has joined: a failure before it means one never came.
        self.everyone_joined = False
        # Set by _prepare once PSI has aligned the rows:
        self.table: PartyTable
        self.schedule: Schedule
        self.labels: torch.Tensor
        self.algorithm: ServerAlgorithm
        self.predictor: AlignedPredictor
        self.evaluation: Evaluation
        self._summary = RunSummary(job_id=self.job.job_id)  # the running job's, once run() starts
        self._step = StepPosition()  # the step in progress: where a divergence happened
        self._readmission: Readmission | None = None  # while the model is kept served after training
        self._best: BestEpoch | None = None  # with validation rows, once training starts

    def _prepare(self, aligned: PartyTable) -> None:
        """Build the schedule and the algorithm's models once the aligned rows are known."""
        self.job = replace(self.job, num_rows=aligned.num_rows)
        self.parties.job = self.job
        self.table = aligned
        if self.psi_only:
            self.schedule = self.job.schedule()
            return
        given = None if self.held_out is None else self.held_out.rows(aligned.ids)
        self.schedule = self.job.schedule(given)
        if self.job.eval_every_rounds and len(self.schedule.test_rows) > BLOCK_ROWS:
            raise ConfigError(
                f"job {self.job.job_id}: [job] eval_every_rounds scores all {len(self.schedule.test_rows)} test rows "
                f"at once, at most {BLOCK_ROWS}; lower test_fraction, or set eval_every_rounds = 0"
            )
        labels, _ = label_tensor(self.job.task, torch.from_numpy(np.asarray(aligned.labels, dtype=np.float64)))
        self.labels = labels  # the true labels: what evaluation scores against
        # The labels the algorithm trains on (randomised with label DP) and the key of its noise.
        trained = labels_to_train_on(self.job, labels, self.schedule.train_rows, self.run_dir)
        self._summary.privacy = trained.report
        self.algorithm = algorithm_spec(self.job.algorithm).active_half()(
            ActiveContext(
                job=self.job,
                schedule=self.schedule,
                parties=self.parties,
                features=torch.from_numpy(np.ascontiguousarray(aligned.features, dtype=np.float32)).to(self.device),
                labels=trained.labels.to(self.device),
                num_outputs=self.job.num_outputs,
                top_hidden=self.plan.top_hidden,
                top_dropout=self.plan.top_dropout,
                after_step=self._after_step,
                factories=self.factories,
                device=self.device,
                privacy_key=trained.key,
                folder=self.run_dir,
            )
        )
        self.predictor = AlignedPredictor(self.job, self.parties, self.algorithm, aligned.ids)
        self.evaluation = Evaluation(self.job, self.schedule, self.parties, self.algorithm, self.labels)

    def align(self) -> AlignmentResult:
        """PSI with every passive party (or its saved result); the rows are then ready to train.

        The ``aligned`` log line, and the result's ``seconds``, time the whole phase it ends:
        from before ``psi_started`` to the models built on the aligned rows. Building them can
        cost more than PSI (the first job of a daemon imports parts of torch), and a line that
        timed PSI alone (``psi_seconds``) read as if the phase had been quick.
        """
        started = time.perf_counter()
        result = align_active(
            self.own_table,
            self.parties,
            cache_dir=self.run_dir / "psi",
            workers=self.settings.psi_workers,
            engine=self.settings.compute_engine,
            chunk_ids=self.settings.psi_chunk_ids,
        )
        self._prepare(result.table)
        if self.schedule.given:  # the dataset's own test rows: every party must hold out the same
            test_rows = self.schedule.test_rows
            self.parties.dispatch(lambda tid: HoldOut(tid, test_rows))
        write_aligned_ids(self.run_dir, result.table.ids)
        result = replace(result, seconds=time.perf_counter() - started)
        log.info(
            "aligned",
            rows=result.table.num_rows,
            reused=result.reused,
            pairwise=result.pairwise,
            seconds=round(result.seconds, 2),
            psi_seconds=round(result.psi_seconds, 2),
        )
        return result

    # ---- the job ----------------------------------------------------------------------------

    def run(
        self,
        *,
        join_timeout_s: float = 300.0,
        late: Callable[[list[int]], Exception] | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_aligned: Callable[[AlignmentResult], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
        keep_serving: bool = False,
        resume: bool = False,
    ) -> RunSummary:
        """Train, evaluate and score the held-out rows; always tell the parties how it ended.

        With ``keep_serving`` the passive parties stay connected after training, so that
        ``predict_ids`` can go on scoring rows until ``shutdown`` is called; a party whose daemon
        restarts meanwhile joins again and loads its trained part (``served_again``). With ``resume`` the
        job continues from the newest checkpoint that every party holds (``_roll_back``);
        without it, every party starts afresh and deletes what an earlier run left. A party lost
        on the way raises PartyLost after the others were told to rejoin (``Finish(rejoin)``).
        Parties that have not joined within ``join_timeout_s`` raise ``late(missing)`` (default:
        ``vflcore.absence.did_not_join``); every party's ``Finish`` quotes it as the job's error does.
        Training that runs away raises TrainingDiverged, naming where and what to change
        (``divergence``); a test loss far past its best is ``on_warning``'s, and the job goes on.
        """
        adopt_torch_threads()  # this may be any thread (the daemon's job thread, a test's)
        summary = self._summary = RunSummary(job_id=self.job.job_id, run_dir=self.run_dir)
        fed = self.parties
        try:
            log.info("waiting_for_parties", parties=list(self.job.passive_parties), timeout_s=join_timeout_s)
            fed.members.wait_until_ready(join_timeout_s, self.stop_event, late=late)
            self.everyone_joined = True
            fed.state = "aligning"
            summary.alignment = self.align()
            if on_aligned is not None:
                on_aligned(summary.alignment)
            if self.psi_only:
                self.shutdown("alignment finished (--psi-only)")
                return summary
            fed.state = "training"
            seed_dropout(self.job)
            first = self._roll_back(resume, summary)
            best = self._best = BestEpoch.of(self.job, summary.epochs)  # None: no validation rows
            if not resume:
                forget(self.run_dir)
            summary.diverged = remembered(self.run_dir)
            if summary.diverged is None:
                self._announce_first_step(first, resume)
                self._train(first, best, summary, on_epoch, on_warning)
            else:  # it ran away after its best epoch, and paused (DivergedServingBest): that epoch is served
                summary.stopped_early = True
                log.warning("serving_best_after_divergence", best=str(best.position if best else None))
            structlog.contextvars.unbind_contextvars("round")
            summary.split = split_summary(self.schedule, None if self.held_out is None else self.held_out.source)
            if best is not None:
                self._serve_best(best, summary)
            fed.state = "serving"
            summary.final_metrics, test_output = self.evaluation.final(self.predict_rows, self.table.ids, self.run_dir)
            summary.wire = fed.traffic.report()
            summary.client_importance = self.algorithm.client_importance()
            releases = self.algorithm.privacy_releases()
            if releases is not None:
                summary.privacy = {**summary.privacy, **releases}
            if summary.client_importance is not None:
                title = f"client importance, {self.job.algorithm}, job {self.job.job_id}"
                write_client_importance(self.run_dir, summary.client_importance, title=title)
                log.info(
                    "client_importance", **{f"party_{p}": round(n, 4) for p, n in summary.client_importance.items()}
                )
            export_model(
                self.job, self.table, self.algorithm, self.schedule, self.run_dir, self.repository_root, summary
            )
            if self.distill is not None:  # the teacher's outputs need every party; the student needs none
                summary.student = self._distil(self.distill, test_output, afresh=first < Position(self.job.epochs))
            write_summary(self.run_dir, self.job, summary, self.algorithm.step_losses)
            if keep_serving:  # a party whose daemon restarts comes back into the served model
                served = None if best is None else best.position
                self._readmission = Readmission(fed, self.own_table.ids, self.table.ids, position=served)
                write_served(self.run_dir, self._readmission.terms, self._readmission.id_set_digests)
                self._readmission.start()
            else:
                self.shutdown("training finished")
            return summary
        except TrainingDiverged as exc:
            diverged = self._located(exc)
            log.error("training_diverged", error=str(diverged))
            served = best_to_serve(None if self._best is None else self._best.position, self.run_dir)
            if served is not None:  # the parties left their step: they come back to serve the best epoch
                remember(self.run_dir, diverged)
                serving = DivergedServingBest(str(diverged), str(served))
                fed.tasks.finish(False, str(serving), rejoin=True)
                fed.abort(JobAborted(str(serving)))
                raise serving from None
            stopped = f"the active party stopped the job: {diverged}"
            fed.tasks.finish(False, stopped)
            fed.abort(JobAborted(stopped))  # what a party in the middle of a step reads (ABORTED)
            raise diverged from None
        except PartyLost as exc:
            paused = f"the job pauses until it can resume: {exc}"
            fed.tasks.finish(False, paused, rejoin=True)
            fed.abort(JobAborted(paused))  # what a party in the middle of a step reads (ABORTED)
            raise
        except BaseException as exc:
            fed.tasks.finish(False, f"the active party stopped the job: {exc}")
            fed.abort(exc if isinstance(exc, Exception) else JobAborted("interrupted"))
            raise

    def _train(
        self,
        first: Position,
        best: BestEpoch | None,
        summary: RunSummary,
        on_epoch: Callable[[EpochReport], None] | None,
        on_warning: Callable[[str], None] | None,
    ) -> None:
        """Train from ``first`` to the last epoch, or until ``patience`` stops it; score and save every epoch."""
        fed = self.parties
        watch = TestLossWatch()
        for done in summary.epochs:  # a resumed job's best so far; its old warnings are not repeated
            watch.observe(done.epoch, done.test_loss, self.job)
        for epoch in range(first.epoch, self.job.epochs):
            structlog.contextvars.bind_contextvars(round=epoch)
            if self.stop_event.is_set():
                raise JobAborted("shutdown requested")
            started = time.perf_counter()
            first_batch = first.batch if epoch == first.epoch else 0
            self._step.start(epoch, first_batch, len(self.algorithm.step_losses))
            self.evaluation.expect_rounds(epoch, first_batch)
            train_loss = self.algorithm.train_epoch(epoch, first_batch)
            test_loss, metrics = self.evaluate(epoch)
            valid_loss, valid_metrics = self.evaluation.validation(epoch)
            wire_mb = fed.traffic.phase_total(f"train {epoch}") / MB
            seconds = time.perf_counter() - started
            rounds = [score.plain() for score in self.evaluation.rounds]
            report = EpochReport(
                epoch, train_loss, test_loss, metrics, seconds, wire_mb, valid_loss, valid_metrics, rounds
            )
            summary.epochs.append(report)
            pinned = None if best is None or not best.observe(report) else best.position
            self._save(Position.after_epoch(epoch), best=pinned)
            fed.dispatch(functools.partial(Checkpoint, position=Position.after_epoch(epoch), best=pinned))
            validation = {} if valid_loss is None else {"valid_loss": valid_loss}
            log.info("epoch_done", train_loss=train_loss, test_loss=test_loss, **validation, **metrics)
            if on_epoch is not None:
                on_epoch(report)
            warning = watch.observe(epoch, test_loss, self.job)
            if warning is not None:
                log.warning("test_loss_rising", test_loss=test_loss, best=watch.best, message=warning)
                if on_warning is not None:
                    on_warning(warning)
            if best is not None and best.should_stop(epoch):
                summary.stopped_early = True
                log.info("stopped_early", epoch=epoch + 1, best=str(best.position), patience=self.job.patience)
                break

    # ---- checkpoints ------------------------------------------------------------------------

    def _save(self, position: Position, *, best: Position | None = None) -> None:
        """Save this party's state as the checkpoint of ``position`` (``resume.save_checkpoint``); pin ``best``'s."""
        save_checkpoint(
            self.run_dir, position, self.algorithm, self._summary.epochs, keep=self.settings.keep_checkpoints, best=best
        )

    # ---- the served epoch -------------------------------------------------------------------

    def _serve_best(self, best: BestEpoch, summary: RunSummary) -> None:
        """Every party loads the best epoch's checkpoint (``Restore(serve=True)``): what is exported and served."""
        served = best.best
        if served is None:  # no epoch was trained in this run nor before it
            return
        position = Position.after_epoch(served.epoch)
        if load_newest(self.run_dir, [position], self.algorithm) is None:
            raise CheckpointError(
                f"{self.run_dir}: the checkpoint of the best epoch ({position}) does not read, so the best model "
                "cannot be served; submit the job again"
            )
        self.parties.dispatch(lambda tid: Restore(tid, position, serve=True))
        summary.best_epoch = served.epoch
        log.info("best_epoch_served", epoch=served.epoch + 1, valid_loss=served.valid_loss)

    def _located(self, exc: TrainingDiverged) -> TrainingDiverged:
        """``exc`` with the step it happened in, the settings to change and the checkpoint kept (``divergence``)."""
        step = self._step
        batch = step.batch(len(self.algorithm.step_losses)) if hasattr(self, "algorithm") else None
        return located(exc, self.job, step.epoch + 1, batch, self.run_dir)

    def _after_step(self, epoch: int, done: int, per_epoch: int) -> None:
        if round_score_due(self.job, epoch, done, per_epoch):
            self.evaluation.score_round(epoch, done, per_epoch)
        if mid_epoch_checkpoint_due(self.job, epoch, done, per_epoch):
            position = Position(epoch, done)
            try:
                self._save(position)
            except TrainingDiverged as exc:  # the weights of the step just done
                raise exc.located(epoch + 1, done, "") from None
            if not self.algorithm.parties_in_step:  # they are idle: tell them, as at an epoch's end
                self.parties.dispatch(functools.partial(Checkpoint, position=position))

    def _roll_back(self, resume: bool, summary: RunSummary) -> Position:
        """Load the newest checkpoint every party holds (``resume.roll_back``); returns where training goes on."""
        chosen, reports = roll_back(self.run_dir, self.job, self.parties, self.algorithm, resume=resume)
        if reports is not None:
            summary.epochs = reports
        return chosen

    def _announce_first_step(self, position: Position, resumed: bool) -> None:
        """Log ``first_step`` once the first training step is done: how long a resumption took is seen here."""
        algorithm = self.algorithm

        def first(step: int) -> None:
            algorithm.on_step = None
            log.info("first_step", step=step, epoch=position.epoch, batch=position.batch, resumed=resumed)

        algorithm.on_step = first

    def serve_saved(self) -> None:
        """Rebuild the trained model from this party's disk, and readmit the passive parties as they reconnect.

        For a server that crashed while it served the model (``served_again``): the saved
        alignment and the checkpoint at the end of training, as a restarted passive party loads
        its own. NotServableAgain says what is missing.
        """
        saved = read_served(self.run_dir, self.own_table.ids)
        self._prepare(select_rows(self.own_table, saved.aligned_ids))
        if load_newest(self.run_dir, [saved.terms.position], self.algorithm) is None:
            raise NotServableAgain(
                f"no readable checkpoint at {saved.terms.position} in {self.run_dir}, the trained model; "
                "submit the job again"
            )
        for party, digest in saved.id_set_digests.items():
            self.parties.members.member(party).id_set_digest = digest  # what rejoin_refusal compares a party's IDs with
        self.everyone_joined = True
        self.parties.state = "serving"
        self._readmission = Readmission(self.parties, self.own_table.ids, self.table.ids, terms=saved.terms)
        self._readmission.start()

    def shutdown(self, message: str) -> None:
        """End the job successfully: every passive party gets Finish and leaves."""
        if self._readmission is not None:
            self._readmission.stop()
        self.parties.tasks.finish(True, message)
        self.parties.state = "finished"

    def evaluate(self, epoch: int) -> tuple[float, dict[str, float]]:
        """Loss and task metrics on the held-out rows, with every party's current model (``Evaluation``)."""
        return self.evaluation.after_epoch(epoch)

    # ---- inference --------------------------------------------------------------------------

    def predict_rows(self, rows: np.ndarray, *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference on aligned rows (``AlignedPredictor.predict_rows``)."""
        return self.predictor.predict_rows(rows, substitutes=substitutes)

    def predict_ids(self, ids: Sequence[str], *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference by sample ID (``AlignedPredictor.predict_ids``); KeyError for an ID not among the aligned rows."""
        return self.predictor.predict_ids(ids, substitutes=substitutes)

    def representation_means(self) -> dict[int, np.ndarray]:
        """Each passive party's mean representation over the training rows (the TVFL-A stand-in)."""
        return self.predictor.representation_means(self.schedule.train_rows)

    def _distil(self, spec: DistillSpec, test_output: np.ndarray | None, *, afresh: bool) -> RunSummary:
        """The student of ``[distill]`` (``distillation``); ``afresh`` when this attempt trained the teacher."""
        ctx = self.algorithm.ctx
        distillation = Distillation(
            self.job,
            spec,
            aligned=self.table,
            features=ctx.features,
            train_labels=ctx.labels,
            labels=self.labels,
            party_dir=self.run_dir,
            repository_root=self.repository_root,
            keep_checkpoints=self.settings.keep_checkpoints,
            top_hidden=self.plan.top_hidden,
            top_dropout=self.plan.top_dropout,
            factory=self.student_factory,
            stop_event=self.stop_event,
        )
        teacher = distillation.teacher_outputs(self.predict_rows, test_output, afresh=afresh)
        return distillation.run(teacher)
