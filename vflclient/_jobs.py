"""Submit, list, follow and cancel jobs on a long-running vfl-server from Python: the Control API.

The Control API takes operator certificates only (``vfl-certs operator NAME``); the server
records the certificate's name as the job's submitter::

    tls = TlsFiles(Path("certs/ca.pem"), Path("certs/alice.pem"), Path("certs/alice.key"))
    with JobClient("vfl.example.org:50051", tls=tls) as jobs:
        job = jobs.submit("jobs/digits.toml")
        for event in jobs.watch(job.id):
            print(event)                   # job-... epoch 3/20 train_loss 0.41 test_loss 0.39 ...
        print(jobs.get(job.id).final_metrics)

An unknown job raises ``JobNotFound``, a reused job id ``DuplicateJob``, a change the job's state
does not allow ``JobStateError``, a job document the server refuses ``ConfigError``, and a
certificate that is not an operator's ``PermissionDenied``. Protobuf stays in this module: the
SDK hands out the frozen dataclasses ``Job``, ``JobEvent`` and ``EpochMetrics``.
"""

from __future__ import annotations

import builtins
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import structlog

from vflclient._exceptions import CONTROL, translated
from vflcore.errors import ConfigError, ServerUnavailable
from vflcore.job.spec import JobSpec, settable_fields
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.runtime.config import load_toml
from vflcore.security.tls import KEEPALIVE_CHANNEL_OPTIONS, TlsFiles, channel_credentials

log = structlog.get_logger(__name__)

#: The states a job never leaves.
ENDED_STATES = frozenset({"finished", "failed", "cancelled", "interrupted"})


@dataclass(frozen=True)
class EpochMetrics:
    """What one finished training epoch measured; ``epoch`` counts from 0, as the server does."""

    epoch: int
    train_loss: float
    test_loss: float
    metrics: dict[str, float]
    seconds: float
    #: Training traffic of the epoch, both directions, every party.
    wire_bytes: int

    def describe(self, epochs: int = 0) -> str:
        """``epoch 3/20 train_loss 0.41 test_loss 0.39 accuracy 0.91 (1.2 s)``, counting from 1."""
        of = f"/{epochs}" if epochs else ""
        return f"epoch {self.epoch + 1}{of} {self.losses()} ({self.seconds:.1f} s)"

    def losses(self) -> str:
        """The losses and metrics, ``train_loss 0.41 test_loss 0.39 accuracy 0.91``."""
        return metrics_text({"train_loss": self.train_loss, "test_loss": self.test_loss, **self.metrics})


@dataclass(frozen=True)
class Job:
    """A job as the server's job store holds it; times are Unix seconds, None before they happen."""

    id: str
    algorithm: str
    #: "queued", "aligning", "training", "waiting" (for a lost party), "finished", "failed",
    #: "cancelled" or "interrupted".
    state: str
    #: The operator who submitted it (the name in their certificate).
    submitter: str
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    error: str
    epochs_done: int
    epochs: int
    final_metrics: dict[str, float]
    #: The job document as submitted: ``{"job": {...}, "algorithm": {...}, ...}``.
    document: dict[str, Any]
    #: Every finished epoch; only ``JobClient.get`` fills it in (``list`` leaves it empty).
    history: list[EpochMetrics]
    #: The trained model is on the server's inference endpoint, under the job's id.
    served: bool
    #: While served, what the model can do now: "serving", "degraded: ..." (stand-ins for a missing
    #: party) or "waiting for party N (why)"; empty when not served.
    serving: str = ""
    #: What its latest state change said: why it is queued or waiting, how it ended. Only
    #: ``JobClient.get`` fills it in.
    state_message: str = ""
    #: A ``[distill]`` job's student (served as ``<id>-student``): its metrics on the job's held-out
    #: rows, the active party alone; empty for a job without a student.
    student_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        """Whether the job is in a state it never leaves (finished, failed, cancelled, interrupted)."""
        return self.state in ENDED_STATES

    def to_json(self) -> dict[str, Any]:
        """Every field as a JSON-able dict (the history as a list of dicts)."""
        return asdict(self)


@dataclass(frozen=True)
class JobEvent:
    """One entry of a job's history: a state change (``kind`` "state"), a finished epoch ("epoch"), or a
    warning ("warning": the job goes on, e.g. its test loss grew far past its best)."""

    job_id: str
    seq: int
    at: float
    kind: str
    #: The job's state after this event.
    state: str
    #: Why, if anything: an error, who cancelled, how many IDs PSI found.
    message: str
    epoch: EpochMetrics | None
    #: Set on the event that finishes a job.
    final_metrics: dict[str, float]
    #: The job's planned epochs, if the client knows them (``JobClient.watch`` does); 0 if not.
    epochs: int = 0

    def to_json(self) -> dict[str, Any]:
        """A flat JSON-able dict; "epoch" only on epoch events, "final_metrics" only when there are some."""
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "seq": self.seq,
            "at": self.at,
            "kind": self.kind,
            "state": self.state,
            "message": self.message,
        }
        if self.epochs:
            out["epochs"] = self.epochs
        if self.kind == "epoch" and self.epoch is not None:
            out["epoch"] = asdict(self.epoch)
        if self.final_metrics:
            out["final_metrics"] = dict(self.final_metrics)
        return out

    def __str__(self) -> str:
        if self.kind == "epoch" and self.epoch is not None:
            return f"{self.job_id} {self.epoch.describe(self.epochs)}"
        if self.kind == "warning":
            return f"{self.job_id} warning: {self.message}"
        line = f"{self.job_id} state {self.state}"
        if self.message:
            line += f": {self.message}"
        if self.final_metrics:
            line += f" ({metrics_text(self.final_metrics)})"
        return line


def metrics_text(metrics: Mapping[str, float]) -> str:
    """``train_loss 0.41 accuracy 0.91``: names and values, 4 significant digits, in the given order."""
    return " ".join(f"{name} {value:.4g}" for name, value in metrics.items())


# ---- job documents ----------------------------------------------------------------------------


def job_document(
    job: str | os.PathLike[str] | Mapping[str, Any] | JobSpec, *, dataset: str | None = None
) -> dict[str, Any]:
    """The job document ``JobClient.submit`` sends, as plain JSON-able dicts and lists.

    ``job`` is a TOML job file's path, the document itself (``{"job": {...}, "algorithm": {...}}``),
    or a ``JobSpec``, whose fields become the ``[job]`` table (all but what the active party sets
    from its data, and those left unset) and whose ``algorithm_options`` the ``[algorithm]`` table. A value JSON cannot
    carry (a TOML date, NaN) raises ConfigError naming its key.
    """
    if isinstance(job, JobSpec):
        # A setting left unset (None: a role's optimizer as the job's) is left out, as a file would.
        table = {f.name: value for f in settable_fields() if (value := getattr(job, f.name)) is not None}
        document: Mapping[str, Any] = {"job": table, "algorithm": dict(job.algorithm_options)}
    elif isinstance(job, Mapping):
        document = job
    else:
        document = load_toml(Path(job), "job file")
    plain = {str(key): _plain(value, str(key)) for key, value in document.items()}
    if dataset is not None:
        plain.setdefault("job", {})["dataset"] = dataset
    return plain


def _plain(value: Any, key: str) -> Any:
    """``value`` as JSON's types (tuples become lists), or ConfigError naming ``key``."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"job document: {key} = {value} is not a finite number, which JSON cannot carry")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ConfigError(
        f"job document: {key} is a {type(value).__name__} ({value!r}), which JSON cannot carry; "
        "write it as a string or a number"
    )


# ---- protobuf, at this one boundary -----------------------------------------------------------


def _epoch_from_proto(message: pb.EpochMetrics) -> EpochMetrics:
    return EpochMetrics(
        epoch=message.epoch,
        train_loss=message.train_loss,
        test_loss=message.test_loss,
        metrics=dict(sorted(message.metrics.items())),
        seconds=message.seconds,
        wire_bytes=message.wire_bytes,
    )


def _job_from_proto(message: pb.JobInfo) -> Job:
    return Job(
        id=message.job_id,
        algorithm=message.algorithm,
        state=message.state,
        submitter=message.submitter,
        submitted_at=message.submitted_at,
        started_at=message.started_at or None,  # 0 on the wire: not yet
        ended_at=message.ended_at or None,
        error=message.error,
        epochs_done=message.epochs_done,
        epochs=message.epochs,
        final_metrics=dict(sorted(message.final_metrics.items())),
        document=json.loads(message.job_document) if message.job_document else {},
        history=[_epoch_from_proto(e) for e in message.history],
        served=message.served,
        serving=message.serving,
        state_message=message.state_message,
        student_metrics=dict(sorted(message.student_metrics.items())),
    )


def _event_from_proto(message: pb.JobEvent, epochs: int) -> JobEvent:
    return JobEvent(
        job_id=message.job_id,
        seq=message.seq,
        at=message.at,
        kind=message.kind,
        state=message.state,
        message=message.message,
        epoch=_epoch_from_proto(message.epoch) if message.HasField("epoch") else None,
        final_metrics=dict(sorted(message.final_metrics.items())),
        epochs=epochs,
    )


# ---- the client -------------------------------------------------------------------------------


class JobClient:
    """Submit, list, follow and cancel jobs on a vfl-server (the Control API); needs an operator certificate.

    Calls are thread-safe; ``close()`` (or leaving the ``with`` block) ends the channel.
    """

    def __init__(
        self,
        address: str,
        *,
        tls: TlsFiles | None = None,
        insecure: bool = False,
        connect_timeout_s: float = 10.0,
        timeout_s: float = 30.0,
    ) -> None:
        if tls is None and not insecure:
            raise ValueError("TLS files are required (an operator certificate); plaintext needs insecure=True")
        # Keepalive: a Watch stream may sit idle for minutes between epochs, behind NATs that drop idle flows.
        if insecure:
            log.warning(
                "insecure_mode",
                warning="plaintext Control channel: no encryption, no server verification; development only",
            )
            self._channel = grpc.insecure_channel(address, options=KEEPALIVE_CHANNEL_OPTIONS)
        else:
            assert tls is not None
            credentials = channel_credentials(tls)
            self._channel = grpc.secure_channel(address, credentials, options=KEEPALIVE_CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout_s)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise ServerUnavailable(
                f"could not reach the server at {address} within {connect_timeout_s:.0f} s: it is down, the "
                "address is wrong, or TLS failed (the CA must be the project's, and the certificate issued by it)"
            ) from None
        self.address, self.timeout_s = address, timeout_s
        self._stub = pb_grpc.ControlStub(self._channel)  # type: ignore[no-untyped-call]

    # ---- calls ------------------------------------------------------------------------------

    def submit(self, job: str | os.PathLike[str] | Mapping[str, Any] | JobSpec, *, dataset: str | None = None) -> Job:
        """Queue a job: a TOML job file's path, a document dict or a ``JobSpec`` (see ``job_document``).

        ``dataset`` names the dataset every party uses (``[job] dataset``), overriding the job's own.
        """
        request = pb.SubmitRequest(job_document=json.dumps(job_document(job, dataset=dataset), allow_nan=False))
        with translated("Submit", CONTROL):
            return _job_from_proto(self._stub.Submit(request, timeout=self.timeout_s))

    def list(self, states: Iterable[str] = (), limit: int = 0) -> builtins.list[Job]:
        """Jobs, newest first: those in ``states`` (every state if empty), at most ``limit`` (0: all)."""
        request = pb.ListRequest(states=builtins.list(states), limit=limit)
        with translated("List", CONTROL):
            reply = self._stub.List(request, timeout=self.timeout_s)
        return [_job_from_proto(info) for info in reply.jobs]

    def get(self, job_id: str) -> Job:
        """One job, with its epoch history."""
        with translated("Get", CONTROL):
            return _job_from_proto(self._stub.Get(pb.JobRef(job_id=job_id), timeout=self.timeout_s))

    def watch(self, job_id: str) -> Iterator[JobEvent]:
        """Every event of the job so far, then each new one as it happens; ends when the job has ended."""
        epochs = self.get(job_id).epochs  # so that each event can say "epoch 3/20"
        call = self._stub.Watch(pb.JobRef(job_id=job_id))
        try:
            with translated("Watch", CONTROL):
                for message in call:
                    yield _event_from_proto(message, epochs)
        finally:
            call.cancel()  # the caller stopped early: end the stream on the server too

    def cancel(self, job_id: str) -> Job:
        """Stop a queued or running job; returns it in its new state (JobStateError if it has ended)."""
        with translated("Cancel", CONTROL):
            return _job_from_proto(self._stub.Cancel(pb.JobRef(job_id=job_id), timeout=self.timeout_s))

    def wait(self, job_id: str) -> Job:
        """Block until the job has ended; returns it as it ended."""
        for _ in self.watch(job_id):
            pass
        return self.get(job_id)

    # ---- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channel; safe to call twice."""
        self._channel.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
