"""The Control API: operators submit, list, follow and cancel jobs (``vfl-jobs`` and ``JobClient``).

Only an operator certificate (URI SAN ``vfl://operator/NAME``) may call it; the operator's name
is read from the verified certificate and recorded as the job's submitter. A party certificate
or an inference caller's certificate is refused with PERMISSION_DENIED. Job documents arrive as
JSON and are checked in full before anything is stored.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
import structlog

from vflcore.errors import ConfigError, PermissionDenied
from vflcore.job.distill import refuse_student_names
from vflcore.job.spec import new_job_id
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.runtime.config import DataSource
from vflcore.security.identity import operator_from_auth_context
from vflcore.status import status_for
from vflserver.jobs.runner import JobRunner
from vflserver.jobs.store import ENDED, JOB_STATES, EpochRecord, JobEvent, JobRecord, JobStore
from vflserver.plan.admission import active_source, check_models, needs_active_table, read_active_table, read_held_out
from vflserver.plan.document import plan_from_document

log = structlog.get_logger(__name__)

#: The submitter recorded in ``--insecure`` mode, where no certificate names anyone.
INSECURE_OPERATOR = "insecure-anonymous"
#: A job document larger than this is refused (a job file is a few hundred bytes).
MAX_DOCUMENT_BYTES = 1 << 20


def _refuse(exc: Exception, context: grpc.ServicerContext, rpc: str) -> None:
    """End the call with the status ``vflcore.status`` gives ``exc`` (INTERNAL if none).

    Every value the Control API checks is the caller's (the job document, a state name): a
    ValueError that no class claims is that request's fault, a ConfigError, not the server's.
    """
    if isinstance(exc, ValueError) and status_for(exc) is None:
        exc = ConfigError(str(exc))
    code = status_for(exc)
    if code is not None:
        log.warning("control_refused", rpc=rpc, code=code.name, reason=str(exc))
        context.abort(code, str(exc))
    log.exception("control_failed", rpc=rpc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error in {rpc}: {exc}")


def submit_job(
    store: JobStore,
    runner: JobRunner,
    document: Mapping[str, Any],
    *,
    submitter: str,
    datasets: Mapping[str, DataSource],
    join_timeout_s: float,
) -> JobRecord:
    """Check ``document``, queue it under its ``[job] job_id`` (or a new id), and wake the runner."""
    plan = plan_from_document(document, default_join_timeout_s=join_timeout_s, job_id=new_job_id())
    refuse_student_names(plan.job.job_id)
    active_source(plan, datasets)  # the passive parties say so at join, before PSI
    read_held_out(plan, datasets)  # a held_out_ids file that cannot be used is refused now, not after PSI
    if needs_active_table(plan):  # its own models probed, and its labels checked, now: not after PSI
        check_models(plan, read_active_table(plan, datasets))
    job_id = plan.job.job_id
    record = store.submit(
        job_id, dict(document), algorithm=plan.job.algorithm, epochs=plan.job.epochs, submitter=submitter
    )
    log.info("job_submitted", job=job_id, algorithm=plan.job.algorithm, submitter=submitter)
    runner.submitted(plan)
    return record


#: How often a Watch with no new event looks whether its caller left or the server is stopping:
#: well inside the 1 s the server's stop gives open calls (``Service.stop``), so a Watch is told
#: the server is shutting down rather than cut off.
WATCH_POLL_S = 0.25


class ControlService(pb_grpc.ControlServicer):
    """Submit, List, Get, Watch and Cancel, for operator certificates only."""

    def __init__(
        self,
        store: JobStore,
        runner: JobRunner,
        *,
        datasets: Mapping[str, DataSource],
        join_timeout_s: float,
        insecure: bool = False,
    ) -> None:
        self.store, self.runner = store, runner
        self.datasets, self.join_timeout_s = datasets, join_timeout_s
        self.insecure = insecure
        self._shut = threading.Event()

    def shut(self) -> None:
        """The server is stopping: every Watch ends at its next poll (UNAVAILABLE), not at gRPC's grace.

        A watched job that was running has been recorded ``interrupted`` by then, and the stream
        delivers that event first and ends as for any ended job.
        """
        self._shut.set()

    def _operator(self, context: grpc.ServicerContext) -> str:
        """The caller's operator name, from its verified certificate."""
        if self.insecure:
            return INSECURE_OPERATOR
        name = operator_from_auth_context(context.auth_context())
        if name is None:
            raise PermissionDenied(
                "the Control API takes operator certificates only (URI SAN vfl://operator/NAME); "
                "this certificate is a party's, an inference caller's or none; issue one with: vfl-certs operator NAME"
            )
        return name

    def Submit(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.JobInfo:
        try:
            operator = self._operator(context)
            if len(request.job_document) > MAX_DOCUMENT_BYTES:
                raise ConfigError(
                    f"job document is {len(request.job_document)} bytes; the limit is {MAX_DOCUMENT_BYTES}"
                )
            try:
                document = json.loads(request.job_document or "{}")
            except json.JSONDecodeError as exc:
                raise ConfigError(f"job document is not valid JSON: {exc}") from None
            except RecursionError:  # arrays nested thousands deep: the caller's fault, not a server fault
                raise ConfigError("job document nests JSON too deeply; a job document is tables of keys") from None
            except ValueError as exc:  # an integer of more than 4300 digits (Python's int_max_str_digits)
                raise ConfigError(f"job document holds a number too large to read ({exc})") from None
            record = submit_job(
                self.store,
                self.runner,
                document,
                submitter=operator,
                datasets=self.datasets,
                join_timeout_s=self.join_timeout_s,
            )
            return job_info(record)
        except Exception as exc:
            _refuse(exc, context, "Submit")
            raise

    def List(self, request: pb.ListRequest, context: grpc.ServicerContext) -> pb.JobList:
        try:
            self._operator(context)
            unknown = [s for s in request.states if s not in JOB_STATES]
            if unknown:
                raise ValueError(f"unknown job state {unknown[0]!r}; the states are {list(JOB_STATES)}")
            records = self.store.list(states=list(request.states), limit=request.limit)
            return pb.JobList(jobs=[job_info(r, serving=self._serving(r)) for r in records])
        except Exception as exc:
            _refuse(exc, context, "List")
            raise

    def Get(self, request: pb.JobRef, context: grpc.ServicerContext) -> pb.JobInfo:
        try:
            self._operator(context)
            record = self.store.get(request.job_id)
            return job_info(
                record,
                history=self.store.epochs(request.job_id),
                serving=self._serving(record),
                state_message=self.store.state_message(request.job_id),
            )
        except Exception as exc:
            _refuse(exc, context, "Get")
            raise

    def _serving(self, record: JobRecord) -> str:
        """The served model's state now, in words (``model_state``): what ``vfl-jobs show`` prints; "" if not served."""
        state = self.runner.serving.model_state(record.job_id) if record.served else None
        return "" if state is None else str(state)

    def Cancel(self, request: pb.JobRef, context: grpc.ServicerContext) -> pb.JobInfo:
        try:
            operator = self._operator(context)
            return job_info(self.runner.cancel(request.job_id, operator))
        except Exception as exc:
            _refuse(exc, context, "Cancel")
            raise

    def Watch(self, request: pb.JobRef, context: grpc.ServicerContext) -> Iterator[pb.JobEvent]:
        try:
            self._operator(context)
            self.store.get(request.job_id)  # NOT_FOUND before the stream starts
        except Exception as exc:
            _refuse(exc, context, "Watch")
            raise
        return self._events(request.job_id, context)

    def _events(self, job_id: str, context: grpc.ServicerContext) -> Iterator[pb.JobEvent]:
        """Every event so far, then each new one, until the job has ended or the caller leaves.

        An "interrupted" event in the history does not end the stream if the job was queued
        again since (a restarted server resumes it): the stream ends where the job now has.
        """
        seq = 0
        while context.is_active():
            for event in self.store.wait_for_events(job_id, seq, timeout_s=WATCH_POLL_S):
                seq = event.seq
                yield job_event(event)
                if event.kind == "state" and event.state in ENDED and self.store.get(job_id).state in ENDED:
                    return
            if self._shut.is_set():
                context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"the server is shutting down; job {job_id} stays in its store: "
                    "watch it again once the server is back",
                )


def job_info(
    record: JobRecord, history: list[EpochRecord] | None = None, *, serving: str = "", state_message: str = ""
) -> pb.JobInfo:
    """A store record as the Control API's JobInfo; ``serving``: its served model's state now, in words."""
    return pb.JobInfo(
        job_id=record.job_id,
        algorithm=record.algorithm,
        state=record.state,
        submitter=record.submitter,
        submitted_at=record.submitted_at,
        started_at=record.started_at or 0.0,
        ended_at=record.ended_at or 0.0,
        error=record.error,
        epochs_done=record.epochs_done,
        epochs=record.epochs,
        final_metrics=record.final_metrics,
        student_metrics=record.student_metrics,
        job_document=json.dumps(record.document, sort_keys=True),
        history=[epoch_metrics(e) for e in history or []],
        served=record.served,
        serving=serving,
        state_message=state_message,
    )


def epoch_metrics(epoch: EpochRecord) -> pb.EpochMetrics:
    return pb.EpochMetrics(
        epoch=epoch.epoch,
        train_loss=epoch.train_loss,
        test_loss=epoch.test_loss,
        metrics=epoch.metrics,
        seconds=epoch.seconds,
        wire_bytes=epoch.wire_bytes,
    )


def job_event(event: JobEvent) -> pb.JobEvent:
    return pb.JobEvent(
        job_id=event.job_id,
        seq=event.seq,
        at=event.at,
        kind=event.kind,
        state=event.state,
        message=event.message,
        epoch=epoch_metrics(event.epoch) if event.epoch is not None else None,
        final_metrics=event.final_metrics,
    )
