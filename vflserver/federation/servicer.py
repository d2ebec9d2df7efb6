"""The Federation gRPC servicer: decode, call the domain, map errors to status codes.

Handlers stay thin. The caller's party id comes from the verified client certificate (or, only
in ``--insecure`` development mode, from a metadata claim), never from a request field. Every
domain error becomes one specific status with a sentence the caller can act on: the status from
the one table in ``vflcore.status``, applied in ``_abort``.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, NoReturn, TypeVar, cast

import grpc
import structlog

from vflcore.errors import IncompleteStream, JobAborted, JoinRejected, Overloaded, PermissionDenied, TensorError
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.security.identity import expiry_from_auth_context, party_from_auth_context
from vflcore.status import status_for
from vflcore.wire import serde as wire
from vflcore.wire.metered import MeteredTensors
from vflcore.wire.names import download_rpc, upload_rpc
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Finish
from vflserver.federation.board import JobBoard
from vflserver.federation.passive_parties import PassiveParties

log = structlog.get_logger(__name__)

#: Metadata key that carries a party claim in --insecure mode, where no certificate exists.
INSECURE_PARTY_HEADER = "x-vfl-insecure-party"


#: How long an upload whose stream ended early waits to learn that its caller cancelled it.
CANCEL_NOTICE_S = 0.5

#: The most batches one ReturnGradients, PushADMMState or PsiDownload call may ask for.
MAX_STREAMED_TENSORS = 1 << 20

_T = TypeVar("_T")


def status_of_error(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status ``exc`` becomes (``vflcore.status``, the one table) with its message; None for a server fault."""
    code = status_for(exc)
    return None if code is None else (code, str(exc))


def _abort(exc: Exception, context: grpc.ServicerContext, rpc: str) -> NoReturn:
    """End the call with the status ``status_of_error`` gives ``exc`` (INTERNAL if none).

    A caller that cancels its call (a party told to stop, a daemon shutting down, a connection
    that went) is not a fault of this server: gRPC then raises a bare ``RpcError`` from the
    request stream, which ends here as one info line and CANCELLED. Logged as a failure, it
    came with a traceback whose frames held the party's tensors. Whatever the error, once the
    call is no longer active the caller has gone and this is the line it gets.
    """
    mapped = status_of_error(exc)
    if not context.is_active():  # the caller has gone: no status it sends reaches anyone
        mapped = (grpc.StatusCode.CANCELLED, f"{rpc} was cancelled by the caller")
        log.info("rpc_cancelled", rpc=rpc, code=mapped[0].name)
    elif mapped is None:
        log.exception("handler_failed", rpc=rpc)
        # only the type: an exception's message may quote a value, and the caller is another party
        mapped = (
            grpc.StatusCode.INTERNAL,
            f"internal error in {rpc} ({type(exc).__name__}); the server log has the details",
        )
    else:
        log.warning("rpc_refused", rpc=rpc, code=mapped[0].name, reason=mapped[1])
    context.abort(*mapped)
    raise AssertionError("unreachable: abort raises")


def _cancelled_meanwhile(context: grpc.ServicerContext, wait_s: float = CANCEL_NOTICE_S) -> bool:
    """Whether the call turns out cancelled within ``wait_s``.

    gRPC ends a cancelled call's request stream first and marks the call cancelled a moment
    later, on another thread; a handler that looks at once sees a stream that just stopped.
    Only a stream that ended early waits here, so no well-formed call pays for it.
    """
    deadline = time.monotonic() + wait_s
    while context.is_active():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _guarded(stream: Iterator[Any], context: grpc.ServicerContext, rpc: str) -> Iterator[Any]:
    """A response stream whose domain errors, raised mid-stream, also become a status."""
    try:
        yield from stream
    except Exception as exc:
        _abort(exc, context, rpc)


def _handler(method: Callable[..., _T]) -> Callable[..., _T]:
    """Turn domain errors raised by a handler, or by the stream it returns, into a status.

    Each call holds one of its party's ``max_party_rpcs`` places until it ends (a stream: until
    its last message), so no party can take every handler thread from the others.
    """

    @functools.wraps(method)
    def wrapper(self: FederationService, request: Any, context: grpc.ServicerContext) -> _T:
        try:
            self.calls.enter(self._identity(context), context, method.__name__)
            result = method(self, request, context)
        except Exception as exc:
            _abort(exc, context, method.__name__)
        if isinstance(result, types.GeneratorType):
            return cast(_T, _guarded(result, context, method.__name__))
        return result

    return wrapper


class PartyCalls:
    """How many calls each party has in flight, capped at ``limit`` per party."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}

    def enter(self, party: int, context: grpc.ServicerContext, rpc: str) -> None:
        """Count one call of ``party`` until ``context`` ends; Overloaded if it has ``limit`` already."""
        with self._lock:
            if self._open.get(party, 0) >= self.limit:
                raise Overloaded(
                    f"party {party} has {self.limit} calls in flight, the most a party may have "
                    f"([server] max_party_rpcs); {rpc} was refused, retry once one of them has ended"
                )
            self._open[party] = self._open.get(party, 0) + 1
        released = threading.Event()

        def leave() -> None:
            if not released.is_set():
                released.set()
                with self._lock:
                    self._open[party] -= 1
                    if not self._open[party]:
                        del self._open[party]

        if not context.add_callback(leave):
            leave()  # the call has ended already

    def open(self, party: int) -> int:
        with self._lock:
            return self._open.get(party, 0)


class FederationService(pb_grpc.FederationServicer):
    """The active party's endpoint for passive parties, for whichever job the board has open."""

    def __init__(self, board: JobBoard, *, insecure: bool = False, max_party_rpcs: int = 16) -> None:
        self.board = board
        self.insecure = insecure
        self.calls = PartyCalls(max_party_rpcs)

    def _caller(self, context: grpc.ServicerContext) -> tuple[int, PassiveParties]:
        """The verified party id of the caller, and the open job, which must name it."""
        party = self._identity(context)
        return party, self.board.for_party(party)

    def _identity(self, context: grpc.ServicerContext) -> int:
        """The verified party id of the caller (any job, or none)."""
        if self.insecure:
            claim = dict(context.invocation_metadata()).get(INSECURE_PARTY_HEADER)
            if not isinstance(claim, str) or not claim.isdigit():
                raise PermissionDenied(f"--insecure mode: send the party id in the {INSECURE_PARTY_HEADER} header")
            party = int(claim)
        else:
            auth = context.auth_context()
            found = party_from_auth_context(auth)
            if found is None:
                raise PermissionDenied(
                    "the client certificate carries no party identity (CN party-N with URI SAN vfl://party/N); "
                    "issue one with: vfl-certs party N"
                )
            party = found
            self.board.directory.saw(party, expires=expiry_from_auth_context(auth))
        return party

    @_handler
    def NextJob(self, request: pb.NextJobRequest, context: grpc.ServicerContext) -> pb.NextJobReply:
        party = self._identity(context)
        offer = self.board.next_offer(party, request.wait_s, context.is_active)
        if offer is None:
            return pb.NextJobReply()
        return pb.NextJobReply(job=wire.job_to_proto(offer.job), dataset=offer.dataset, model=offer.model)

    @_handler
    def Join(self, request: pb.JoinRequest, context: grpc.ServicerContext) -> pb.JoinReply:
        party, parties = self._caller(context)
        if request.job_id and request.job_id != parties.job.job_id:
            raise JoinRejected(
                f"job {request.job_id!r} is not the job waiting for parties now ({parties.job.job_id!r}); "
                "ask NextJob again"
            )
        if request.party != party:
            raise PermissionDenied(
                f"this connection's certificate identifies party {party}, but the request claims party "
                f"{request.party}; run vfl-client with --party {party} or use party {request.party}'s certificate"
            )
        log.info("join_request", peer=party, features=request.num_features, client_version=request.client_version)
        self.board.directory.saw(party, client_version=request.client_version)
        job = parties.join(
            party,
            bytes(request.id_set_digest),
            request.num_rows,
            frozenset(bytes(k) for k in request.cached_alignments),
            tuple(wire.position_from_proto(p) for p in request.checkpoints),
            frozenset(bytes(k) for k in request.resumable_psi),
        )
        return pb.JoinReply(job=wire.job_to_proto(job))

    @_handler
    def Subscribe(self, request: pb.SubscribeRequest, context: grpc.ServicerContext) -> Iterator[pb.Task]:
        party, parties = self._caller(context)
        if request.job_id and request.job_id != parties.job.job_id:
            raise JoinRejected(f"job {request.job_id!r} is not running (the running job is {parties.job.job_id!r})")
        tasks, session = parties.liveness.subscribe(party)
        context.add_callback(lambda: parties.liveness.leave(party, session))
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
        party = self._identity(context)
        parties = self.board.current()
        if parties is None or party not in parties.job.passive_parties:
            return pb.HeartbeatReply(party=party, job_id="", state="idle")
        parties.liveness.heartbeat(party)
        return pb.HeartbeatReply(party=party, job_id=parties.job.job_id, state=parties.state)

    @_handler
    def SendEmbeddings(self, request_iterator: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
        return self._upload(request_iterator, context, "SendEmbeddings")

    @_handler
    def PsiUpload(self, request_iterator: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
        return self._upload(request_iterator, context, "PsiUpload")

    def _upload(self, chunks: Iterator[pb.TensorChunk], context: grpc.ServicerContext, rpc: str) -> pb.SendAck:
        """Accept every tensor the stream carries, each as soon as it is whole.

        A refused tensor ends the stream with its error; the tensors before it stay accepted,
        and nothing of it or after it is stored.
        """
        party, parties = self._caller(context)

        def expect(key: TensorKey, dtype: str, shape: tuple[int, ...]) -> None:
            """On each tensor's first chunk, before a byte is buffered: the right RPC, and awaited."""
            if upload_rpc(key.name) != rpc:
                raise TensorError("key.name", f"{key.name!r} does not travel on {rpc}, but on {upload_rpc(key.name)}")
            parties.uploads.check_announced(party, key, dtype, shape)

        last: TensorKey | None = None
        count = received = 0
        try:
            for key, array in MeteredTensors(parties.traffic, party).decode_stream(chunks, expect):
                parties.uploads.accept(party, key, array)
                last, count, received = key, count + 1, received + array.nbytes
        except IncompleteStream:
            _cancelled_meanwhile(context)  # a cancel is then reported as one (``_abort``)
            raise
        assert last is not None  # tensors_from_chunks refuses an empty stream
        return pb.SendAck(key=wire.key_to_proto(last), bytes_received=received, tensors=count)

    @_handler
    def ReturnGradients(self, request: pb.TensorRequest, context: grpc.ServicerContext) -> Iterator[pb.TensorChunk]:
        return self._download(request, context, "ReturnGradients")

    @_handler
    def PsiDownload(self, request: pb.TensorRequest, context: grpc.ServicerContext) -> Iterator[pb.TensorChunk]:
        return self._download(request, context, "PsiDownload")

    @_handler
    def PushADMMState(self, request: pb.TensorRequest, context: grpc.ServicerContext) -> Iterator[pb.TensorChunk]:
        return self._download(request, context, "PushADMMState")

    def _download(self, request: pb.TensorRequest, context: grpc.ServicerContext, rpc: str) -> Iterator[pb.TensorChunk]:
        party, parties = self._caller(context)
        first = wire.key_from_proto(request.key)
        if first.job_id != parties.job.job_id:
            raise TensorError("key.job_id", f"{first.job_id!r} is not the running job {parties.job.job_id!r}")
        names = list(request.names) or [first.name]
        for name in names:
            if download_rpc([name]) != rpc:
                raise TensorError("key.name", f"{name!r} does not travel on {rpc}, but on {download_rpc([name])}")
        if request.count > MAX_STREAMED_TENSORS:
            raise TensorError("count", f"{request.count} batches in one call; ask for at most {MAX_STREAMED_TENSORS}")
        parties.uploads.require_in_this_run(party)  # a well-formed call, but of a run that paused: ABORTED
        timeout = parties.psi_timeout_s if rpc == "PsiDownload" else None
        keys = [
            replace(first, batch=first.batch + i, name=name) for i in range(max(1, request.count)) for name in names
        ]
        return self._stream_downloads(parties, party, keys, timeout, context)

    @staticmethod
    def _stream_downloads(
        parties: PassiveParties,
        party: int,
        keys: list[TensorKey],
        timeout: float | None,
        context: grpc.ServicerContext,
    ) -> Iterator[pb.TensorChunk]:
        """Each tensor as soon as the training loop publishes it, in order.

        A call its party cancelled stops waiting, and takes nothing: a PSI attempt that failed left
        one behind on the same connection, and it took the chunk the resumed PSI published next,
        which then waited out ``psi_timeout_s`` (issue 36, the link-fault test).
        """

        def still_wanted() -> None:
            if not context.is_active():
                raise JobAborted(f"party {party} cancelled its download")

        metered = MeteredTensors(parties.traffic, party)
        for key in keys:
            array = parties.downloads.collect(party, key, timeout_s=timeout, check=still_wanted)
            yield from metered.encode(key, array, parties.downloads.codec(party, key))

    @_handler
    def FetchHead(self, request_iterator: Iterator[pb.TensorChunk], context: grpc.ServicerContext) -> pb.SendAck:
        return self._upload(request_iterator, context, "FetchHead")

    @_handler
    def ReportFailure(self, request: pb.FailureReport, context: grpc.ServicerContext) -> pb.FailureAck:
        party = self._identity(context)
        parties = self.board.current()
        if parties is None or not concerns_this_run(parties, party, request.job_id, request.task_id):
            # A late report of a job that has ended, or of an earlier run of this one: nothing waits on it.
            log.info("stale_failure_report", peer=party, job=request.job_id, reason=request.message)
            return pb.FailureAck()
        parties.liveness.report_failure(party, request.message or "no reason given")
        return pb.FailureAck()


def concerns_this_run(parties: PassiveParties, party: int, job_id: str, task_id: int) -> bool:
    """Whether ``party``'s failure report fails this run of the open job.

    A refusal before Join (task 0: no dataset of the job's name, weaker privacy) does, and so does a
    task of a party that joined this run. A task of a party that has not joined it is of an earlier
    run, which paused: reported as a failure, a late upload's refusal failed the resumed job.
    """
    if job_id != parties.job.job_id or party not in parties.job.passive_parties:
        return False
    return not task_id or parties.members.member(party).joined
