"""The Federation gRPC servicer: decode, call the domain, map errors to status codes.

Handlers stay thin. The caller's party id comes from the verified client certificate (or, only
in ``--insecure`` development mode, from a metadata claim), never from a request field. Every
domain error becomes one specific status with a sentence the caller can act on, in one place:
``_status_for``.
"""

from __future__ import annotations

import functools
import queue
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, NoReturn, TypeVar, cast

import grpc
import structlog

from vflcore import wire
from vflcore.errors import JobAborted, JoinRejected, NotBuiltYet, PartyUnavailable, PermissionDenied
from vflcore.identity import party_from_auth_context
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.tasks import HEAD, Finish, is_admm_name, is_psi_name
from vflcore.tensors import TensorError, TensorKey
from vflserver.federation import Federation

log = structlog.get_logger(__name__)

#: Metadata key that carries a party claim in --insecure mode, where no certificate exists.
INSECURE_PARTY_HEADER = "x-vfl-insecure-party"


@dataclass(frozen=True)
class _Kind:
    """Which tensor names one RPC carries: each exchange keeps to its own call."""

    rpc: str
    carries: Callable[[str], bool]


def _is_training_name(name: str) -> bool:
    return not (is_psi_name(name) or is_admm_name(name) or name == HEAD)


_UPLOAD = _Kind("SendEmbeddings (training tensors)", _is_training_name)
_TRAINING = _Kind("ReturnGradients (training tensors)", _is_training_name)
_PSI_UP = _Kind("PsiUpload (PSI tensors)", is_psi_name)
_PSI = _Kind("PsiDownload (PSI tensors)", is_psi_name)
_ADMM = _Kind("PushADMMState (VIMADMM state)", is_admm_name)
_HEAD = _Kind("FetchHead (a party's head)", lambda name: name == HEAD)

#: The most batches one ReturnGradients, PushADMMState or PsiDownload call may ask for.
MAX_STREAMED_TENSORS = 1 << 20

_T = TypeVar("_T")


def _status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The one mapping from domain errors to gRPC status codes."""
    table: list[tuple[type[BaseException], grpc.StatusCode]] = [
        (TensorError, grpc.StatusCode.INVALID_ARGUMENT),
        (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
        (JoinRejected, grpc.StatusCode.FAILED_PRECONDITION),
        (PartyUnavailable, grpc.StatusCode.UNAVAILABLE),
        (JobAborted, grpc.StatusCode.ABORTED),
        (NotBuiltYet, grpc.StatusCode.UNIMPLEMENTED),
        (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    ]
    for kind, code in table:
        if isinstance(exc, kind):
            return code, str(exc)
    return None


def _abort(exc: Exception, context: grpc.ServicerContext, rpc: str) -> NoReturn:
    """End the call with the status ``_status_for`` gives ``exc`` (INTERNAL if none)."""
    mapped = _status_for(exc)
    if mapped is None:
        log.exception("handler_failed", rpc=rpc)
        mapped = (grpc.StatusCode.INTERNAL, f"internal error in {rpc}: {exc}")
    else:
        log.warning("rpc_refused", rpc=rpc, code=mapped[0].name, reason=mapped[1])
    context.abort(*mapped)
    raise AssertionError("unreachable: abort raises")


def _guarded(stream: Iterator[Any], context: grpc.ServicerContext, rpc: str) -> Iterator[Any]:
    """A response stream whose domain errors, raised mid-stream, also become a status."""
    try:
        yield from stream
    except Exception as exc:
        _abort(exc, context, rpc)


def _handler(method: Callable[..., _T]) -> Callable[..., _T]:
    """Turn domain errors raised by a handler, or by the stream it returns, into a status."""

    @functools.wraps(method)
    def wrapper(self: FederationService, request: Any, context: grpc.ServicerContext) -> _T:
        try:
            result = method(self, request, context)
        except Exception as exc:
            _abort(exc, context, method.__name__)
        if isinstance(result, types.GeneratorType):
            return cast(_T, _guarded(result, context, method.__name__))
        return result

    return wrapper


class FederationService(pb_grpc.FederationServicer):
    """The active party's endpoint for passive parties."""

    def __init__(self, federation: Federation, *, insecure: bool = False) -> None:
        self.federation = federation
        self.insecure = insecure

    def _caller(self, context: grpc.ServicerContext) -> int:
        """The verified party id of the caller."""
        if self.insecure:
            claim = dict(context.invocation_metadata()).get(INSECURE_PARTY_HEADER)
            if not isinstance(claim, str) or not claim.isdigit():
                raise PermissionDenied(f"--insecure mode: send the party id in the {INSECURE_PARTY_HEADER} header")
            party = int(claim)
        else:
            found = party_from_auth_context(context.auth_context())
            if found is None:
                raise PermissionDenied(
                    "the client certificate carries no party identity (CN party-N with URI SAN vfl://party/N); "
                    "issue one with: vfl-certs party N"
                )
            party = found
        if party not in self.federation.job.passive_parties:
            raise PermissionDenied(
                f"party {party} is not a passive party of job {self.federation.job.job_id!r} "
                f"(it expects {list(self.federation.job.passive_parties)})"
            )
        self.federation.touch(party)
        return party

    @_handler
    def Join(self, request: pb.JoinRequest, context: grpc.ServicerContext) -> pb.JoinReply:
        party = self._caller(context)
        if request.party != party:
            raise PermissionDenied(
                f"this connection's certificate identifies party {party}, but the request claims party "
                f"{request.party}; run vfl-client with --party {party} or use party {request.party}'s certificate"
            )
        log.info("join_request", peer=party, features=request.num_features, client_version=request.client_version)
        job = self.federation.join(
            party,
            bytes(request.id_set_digest),
            request.num_rows,
            frozenset(bytes(k) for k in request.cached_alignments),
        )
        return pb.JoinReply(job=wire.job_to_proto(job))

    @_handler
    def Subscribe(self, request: pb.SubscribeRequest, context: grpc.ServicerContext) -> Iterator[pb.Task]:
        party = self._caller(context)
        tasks = self.federation.subscribe(party)
        context.add_callback(lambda: self.federation.leave(party))
        return self._task_stream(tasks, context)

    @staticmethod
    def _task_stream(tasks: queue.Queue[Any], context: grpc.ServicerContext) -> Iterator[pb.Task]:
        while context.is_active():
            try:
                task = tasks.get(timeout=0.5)
            except queue.Empty:
                continue
            yield wire.task_to_proto(task)
            if isinstance(task, Finish):
                return

    @_handler
    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.HeartbeatReply:
        party = self._caller(context)
        return pb.HeartbeatReply(party=party, job_id=self.federation.job.job_id, state=self.federation.state)

    @_handler
    def SendEmbeddings(self, request_iterator: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
        return self._upload(request_iterator, context, _UPLOAD)

    @_handler
    def PsiUpload(self, request_iterator: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
        return self._upload(request_iterator, context, _PSI_UP)

    def _upload(self, chunks: Iterator[pb.TensorChunk], context: grpc.ServicerContext, kind: _Kind) -> pb.SendAck:
        """Accept every tensor the stream carries, each as soon as it is whole.

        A refused tensor ends the stream with its error; the tensors before it stay accepted,
        and nothing of it or after it is stored.
        """
        party = self._caller(context)
        last: TensorKey | None = None
        count = received = 0
        for key, array in wire.tensors_from_chunks(self.federation.traffic.receiving(party, chunks)):
            if not kind.carries(key.name):
                raise TensorError("key.name", f"{key.name!r} does not travel on {kind.rpc}")
            self.federation.accept_upload(party, key, array)
            last, count, received = key, count + 1, received + array.nbytes
        assert last is not None  # tensors_from_chunks refuses an empty stream
        return pb.SendAck(key=wire.key_to_proto(last), bytes_received=received, tensors=count)

    @_handler
    def ReturnGradients(self, request: pb.TensorRequest, context: grpc.ServicerContext) -> Iterator[pb.TensorChunk]:
        return self._download(request, context, _TRAINING)

    @_handler
    def PsiDownload(self, request: pb.TensorRequest, context: grpc.ServicerContext) -> Iterator[pb.TensorChunk]:
        return self._download(request, context, _PSI)

    @_handler
    def PushADMMState(self, request: pb.TensorRequest, context: grpc.ServicerContext) -> Iterator[pb.TensorChunk]:
        return self._download(request, context, _ADMM)

    def _download(
        self, request: pb.TensorRequest, context: grpc.ServicerContext, kind: _Kind
    ) -> Iterator[pb.TensorChunk]:
        party = self._caller(context)
        first = wire.key_from_proto(request.key)
        if first.job_id != self.federation.job.job_id:
            raise TensorError("key.job_id", f"{first.job_id!r} is not the running job {self.federation.job.job_id!r}")
        names = list(request.names) or [first.name]
        for name in names:
            if not kind.carries(name):
                raise TensorError("key.name", f"{name!r} does not travel on {kind.rpc}")
        if request.count > MAX_STREAMED_TENSORS:
            raise TensorError("count", f"{request.count} batches in one call; ask for at most {MAX_STREAMED_TENSORS}")
        timeout = self.federation.psi_timeout_s if kind is _PSI else None
        keys = [
            replace(first, batch=first.batch + i, name=name) for i in range(max(1, request.count)) for name in names
        ]
        return self._stream_downloads(party, keys, timeout)

    def _stream_downloads(self, party: int, keys: list[TensorKey], timeout: float | None) -> Iterator[pb.TensorChunk]:
        """Each tensor as soon as the training loop publishes it, in order."""
        traffic = self.federation.traffic
        for key in keys:
            array = self.federation.collect(party, key, timeout_s=timeout)
            yield from traffic.sending(party, key, wire.tensor_to_chunks(key, array))

    @_handler
    def FetchHead(self, request_iterator: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
        return self._upload(request_iterator, context, _HEAD)

    @_handler
    def ReportFailure(self, request: pb.FailureReport, context: grpc.ServicerContext) -> pb.FailureAck:
        party = self._caller(context)
        self.federation.report_failure(party, request.message or "no reason given")
        return pb.FailureAck()
