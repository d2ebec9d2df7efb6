"""A passive party's connection to the active party: the only module that holds a gRPC stub.

It dials out (the party needs no open port), sends and receives chunked tensors, and turns
every gRPC failure into an SDK error through ``translated``.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType

import grpc
import numpy as np
import structlog

from vflclient._exceptions import translated
from vflcore import work_items
from vflcore.data.tables import PartyTable, ids_digest
from vflcore.errors import ServerUnavailable, TensorError, VflError
from vflcore.job.schedule import Position
from vflcore.job.spec import ACTIVE_PARTY, JobSpec, Offer
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.security.tls import KEEPALIVE_CHANNEL_OPTIONS, TlsFiles, channel_credentials
from vflcore.wire import serde as wire
from vflcore.wire.codecs import FP32, WireCodec, job_codecs
from vflcore.wire.links import TensorExchange, TrainingLink
from vflcore.wire.metered import MeteredTensors
from vflcore.wire.names import download_rpc, upload_rpc
from vflcore.wire.tensors import TensorKey
from vflcore.wire.traffic import Traffic

log = structlog.get_logger(__name__)

CLIENT_VERSION = "0.1.0"

#: How much longer than the server may hold a long-polling call the client waits for its reply.
_CALL_SLACK_S = 10.0

# Must match vflserver.federation.servicer.INSECURE_PARTY_HEADER; duplicated here so the SDK does not import
# the server package.
_INSECURE_PARTY_HEADER = "x-vfl-insecure-party"


class Connection(TrainingLink):
    """An open, verified channel from one passive party to the server."""

    def __init__(
        self,
        address: str,
        party: int,
        *,
        tls: TlsFiles | None,
        insecure: bool = False,
        connect_timeout_s: float = 60.0,
        stop: threading.Event | None = None,
        fail_fast: bool = False,
    ) -> None:
        """Dial ``address`` and wait until the channel is ready (at most ``connect_timeout_s``).

        ``stop``, once set, ends the wait at once: a daemon asked to shut down does not sit out
        a connection attempt to a server that is not there. With ``fail_fast`` the first failed
        attempt (refused, unreachable, handshake failed) ends the wait, for a caller that retries
        with its own backoff and logs each try; without it, gRPC keeps trying until the timeout.
        """
        if tls is None and not insecure:
            raise ValueError("TLS files are required; plaintext needs insecure=True (the --insecure flag)")
        self.address, self.party = address, party
        if insecure:
            log.warning("insecure_mode", warning="plaintext channel: no encryption, no server verification")
            self._channel = grpc.insecure_channel(address, options=KEEPALIVE_CHANNEL_OPTIONS)
            self._metadata: tuple[tuple[str, str], ...] = ((_INSECURE_PARTY_HEADER, str(party)),)
        else:
            assert tls is not None
            self._channel = grpc.secure_channel(address, channel_credentials(tls), options=KEEPALIVE_CHANNEL_OPTIONS)
            self._metadata = ()
        started = time.monotonic()
        if not _wait_until_ready(self._channel, connect_timeout_s, stop, fail_fast):
            self._channel.close()
            raise ServerUnavailable(
                f"could not reach the server at {address} (gave up after {time.monotonic() - started:.1f} s of "
                f"at most {connect_timeout_s:.0f} s: down, wrong address, or a TLS failure); "
                "run `vfl-client --check` for a diagnosis"
            ) from None
        self._stub = pb_grpc.FederationStub(self._channel)  # type: ignore[no-untyped-call]
        #: Bytes this party sent to and received from the server, per phase (``vflcore.wire.traffic``).
        self.traffic = Traffic()
        self._metered = MeteredTensors(self.traffic, ACTIVE_PARTY)
        #: The joined job's wire codecs (``[job] wire_codec``): up for a step's uploads, down for its answers.
        self._wire: tuple[WireCodec, WireCodec] = (FP32, FP32)
        self._subscription: grpc.Call | None = None
        #: Set by ``close``: long work on this connection's behalf (PSI) gives up at once.
        self.closing = threading.Event()
        #: The ``receive`` calls in flight, for ``cancel_downloads``.
        self._downloads: set[grpc.Call] = set()
        self._downloads_lock = threading.Lock()

    # ---- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel the task stream and close the channel; safe to call twice."""
        self.closing.set()
        if self._subscription is not None:
            self._subscription.cancel()
        self._channel.close()

    @contextmanager
    def closing_is_stopping(self) -> Iterator[None]:
        """Whatever fails once this connection was closed (``close``: the daemon is stopping) is ServerUnavailable.

        A signal handler closes the channel under a working thread; the call that thread makes
        next fails with grpc's ``ValueError`` (a closed channel), wherever it is: joining,
        subscribing, sending. That is a stop, not a fault of this party or the server.
        """
        try:
            yield
        except Exception as exc:
            if self.closed and not isinstance(exc, VflError):
                raise ServerUnavailable("the connection was closed: this party is stopping") from exc
            raise

    @property
    def closed(self) -> bool:
        """``close`` was called: a call that fails from now on failed because of it."""
        return self.closing.is_set()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- calls ------------------------------------------------------------------------------

    def next_job(self, wait_s: float = 30.0) -> Offer | None:
        """The next job that names this party, with the dataset and model it is to use; None if none came in ``wait_s``.

        The server holds the call until such a job waits for its parties (at most ``wait_s``);
        ask again after None. This is how a daemon takes part in job after job.
        """
        with translated("NextJob"):
            reply = self._stub.NextJob(
                pb.NextJobRequest(wait_s=wait_s), metadata=self._metadata, timeout=wait_s + _CALL_SLACK_S
            )
        if not reply.job.job_id:
            return None
        return Offer(wire.job_from_proto(reply.job), reply.dataset, reply.model)

    def join(
        self,
        table: PartyTable,
        cached_alignments: Sequence[bytes] = (),
        job_id: str = "",
        checkpoints: Sequence[Position] = (),
        resumable_psi: Sequence[bytes] = (),
    ) -> JobSpec:
        """Join the server's job (``job_id``, as ``next_job`` offered it; "": the waiting one); returns its settings.

        ``cached_alignments`` are the keys of PSI results this party saved earlier; if every
        party still has the one for the current data, the server skips PSI. ``checkpoints`` are
        the positions of this job whose checkpoints this party can read: a resumed job continues
        from the newest one every party holds. ``resumable_psi`` are the keys of the PSI
        exchanges this party was in when it stopped and kept the secrets of: the server resumes
        such an exchange at its last chunk rather than starting it again.
        """
        request = pb.JoinRequest(
            party=self.party,
            num_rows=table.num_rows,
            num_features=table.features.shape[1],
            id_set_digest=ids_digest(table.ids),
            client_version=CLIENT_VERSION,
            cached_alignments=list(cached_alignments),
            job_id=job_id,
            checkpoints=[wire.position_to_proto(p) for p in checkpoints],
            resumable_psi=list(resumable_psi),
        )
        with translated("Join"):
            reply = self._stub.Join(request, metadata=self._metadata)
        job = wire.job_from_proto(reply.job)
        self._wire = job_codecs(job)
        return job

    def tasks(self, job_id: str) -> Iterator[work_items.Task]:
        """The server's work for this party, in order, until a Finish task."""
        call = self._stub.Subscribe(pb.SubscribeRequest(job_id=job_id), metadata=self._metadata)
        self._subscription = call
        with translated("Subscribe"):
            for message in call:
                yield wire.task_from_proto(message)

    def start_heartbeats(self, job_id: str, every_s: float) -> threading.Event:
        """Call Heartbeat every ``every_s`` seconds in the background; set the returned event to stop.

        gRPC keepalive already keeps the TCP flow open; the heartbeat adds an application-level
        sign of life that the server records, and shows up in this party's log when it fails.
        """
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(every_s):
                try:
                    with self.closing_is_stopping():
                        self.heartbeat(job_id, timeout_s=every_s)
                except VflError as exc:
                    if self.closed:
                        return  # the daemon is stopping: no failure, and no traceback from this thread
                    log.warning("heartbeat_failed", reason=str(exc))

        threading.Thread(target=beat, name="heartbeat", daemon=True).start()
        return stop

    def heartbeat(self, job_id: str = "", timeout_s: float = 10.0) -> tuple[int, str]:
        """Who the server says this party is, and the job's state."""
        with translated("Heartbeat"):
            reply = self._stub.Heartbeat(pb.HeartbeatRequest(job_id=job_id), metadata=self._metadata, timeout=timeout_s)
        return reply.party, reply.state

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        """Upload one tensor (chunked) for ``key``, on the call its name travels on (``upload_rpc``)."""
        rpc = upload_rpc(key.name)
        with translated(rpc):
            getattr(self._stub, rpc)(self._metered.encode(key, array), metadata=self._metadata)

    def receive(self, key: TensorKey) -> np.ndarray:
        """Download the tensor the server holds for ``key``; waits until the server has it."""
        rpc = download_rpc([key.name])
        with translated(rpc):
            chunks = getattr(self._stub, rpc)(pb.TensorRequest(key=wire.key_to_proto(key)), metadata=self._metadata)
            with self._downloads_lock:
                self._downloads.add(chunks)
            try:
                got, array = self._metered.decode(chunks)
            finally:
                with self._downloads_lock:
                    self._downloads.discard(chunks)
        if got != key:
            raise TensorError("key", f"{rpc}: asked for {key}, the server sent {got}")
        return array

    def cancel_downloads(self) -> None:
        """Cancel every ``receive`` still waiting: a failed PSI attempt leaves its streams' calls open
        on this connection, and the server must not hand one of them the next attempt's tensor."""
        with self._downloads_lock:
            calls = list(self._downloads)
        for call in calls:
            call.cancel()

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        """A round over two streams that stay open: SendEmbeddings up, ReturnGradients (or PushADMMState) down.

        Per batch this costs one message each way instead of two calls, which is most of the
        difference between federated and in-process training time (``make bench-overhead``).
        """
        names = (down,) if isinstance(down, str) else down
        if upload_rpc(up) != "SendEmbeddings":
            raise ValueError(f"{up!r} travels on {upload_rpc(up)}, not on a round's upload stream; use send()")
        return _StreamedExchange(
            self._stub,
            self._metadata,
            self._metered,
            job_id,
            round_,
            batches,
            up=up,
            down=names,
            first=first,
            codecs=self._wire,
        )

    def report_failure(self, job_id: str, task_id: int, message: str) -> None:
        """Tell the server this party's side of a task failed; best effort."""
        try:
            self._stub.ReportFailure(
                pb.FailureReport(job_id=job_id, task_id=task_id, message=message),
                metadata=self._metadata,
                timeout=5,
            )
        except grpc.RpcError as exc:
            log.warning("report_failure_lost", reason=str(exc))


#: How often a connection attempt looks at its ``stop`` event while it waits for the channel.
_STOP_POLL_S = 0.1


def _wait_until_ready(channel: grpc.Channel, timeout_s: float, stop: threading.Event | None, fail_fast: bool) -> bool:
    """True once ``channel`` is ready; False after ``timeout_s``, once ``stop`` is set, or (with
    ``fail_fast``) once an attempt has failed.

    A failed attempt cancels the wait from gRPC's callback, so a refused connection (a server
    that is restarting) returns at once and the daemon's backoff alone sets the pace of retries;
    polling for the failure added up to a poll interval to every retry.
    """
    failed = threading.Event()
    ready = grpc.channel_ready_future(channel)

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            failed.set()
            ready.cancel()

    if fail_fast:
        channel.subscribe(watch, try_to_connect=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            try:
                ready.result(timeout=max(0.0, min(_STOP_POLL_S, remaining)))
                return True
            except grpc.FutureCancelledError:
                return False
            except grpc.FutureTimeoutError:
                if remaining <= 0 or failed.is_set() or (stop is not None and stop.is_set()):
                    ready.cancel()
                    return False
    finally:
        if fail_fast:
            channel.unsubscribe(watch)


class _StreamedExchange(TensorExchange):
    """Uploads queued onto one SendEmbeddings stream; answers read off one ReturnGradients stream.

    The upload stream is fed from a queue by gRPC's own thread, so ``send`` does not wait for
    the network. If the server refuses an upload, the download stream is cancelled at once, so
    a ``receive`` waiting on it wakes up and raises the server's reason, not a bare cancel.
    """

    def __init__(
        self,
        stub: pb_grpc.FederationStub,
        metadata: tuple[tuple[str, str], ...],
        metered: MeteredTensors,
        job_id: str,
        round_: int,
        batches: int,
        *,
        up: str,
        down: tuple[str, ...],
        first: int = 0,
        codecs: tuple[WireCodec, WireCodec] = (FP32, FP32),
    ) -> None:
        self._job_id, self._round, self._up, self._down = job_id, round_, up, down
        self._wire_up, wire_down = codecs
        self._rpc = download_rpc(down)
        self._outbox: queue.SimpleQueue[pb.TensorChunk | None] = queue.SimpleQueue()
        start = TensorKey(job_id, round_, first, down[0])
        request = pb.TensorRequest(key=wire.key_to_proto(start), count=batches - first, names=list(down))
        self._download = getattr(stub, self._rpc)(request, metadata=metadata)
        self._metered = metered
        # A step's answers come as float32, or in the job's down codec; nothing else is taken.
        allowed = {"float32", wire_down.dtype}
        self._arrivals = metered.decode_stream(self._download, functools.partial(_only_dtypes, allowed))
        self._upload = stub.SendEmbeddings.future(iter(self._outbox.get, None), metadata=metadata)
        self._upload.add_done_callback(self._stop_downloads_if_refused)

    def _stop_downloads_if_refused(self, upload: grpc.Future) -> None:
        if not upload.cancelled() and upload.exception() is not None:
            self._download.cancel()

    def _raise_upload_error(self) -> None:
        if self._upload.done() and not self._upload.cancelled() and self._upload.exception() is not None:
            with translated("SendEmbeddings"):
                self._upload.result()

    def send(self, batch: int, array: np.ndarray) -> None:
        self._raise_upload_error()
        key = TensorKey(self._job_id, self._round, batch, self._up)
        for chunk in self._metered.encode(key, array, self._wire_up):
            self._outbox.put(chunk)

    def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
        return {name: self._next(TensorKey(self._job_id, self._round, batch, name)) for name in self._down}

    def _next(self, want: TensorKey) -> np.ndarray:
        try:
            with translated(self._rpc):
                got, array = next(self._arrivals)
        except TensorError:
            raise  # the server sent a malformed tensor: that is the cause, whatever the upload did
        except VflError:
            self._raise_upload_error()  # the real cause, if the server refused an upload
            raise
        except StopIteration:
            raise TensorError("key", f"{self._rpc}: the server ended the stream before {want}") from None
        if got != want:
            raise TensorError("key", f"{self._rpc}: expected {want}, the server sent {got}")
        return array

    def close(self) -> None:
        self._outbox.put(None)
        with translated("SendEmbeddings"):
            self._upload.result()
        self._download.cancel()  # a no-op once every answer has arrived

    def cancel(self) -> None:
        self._outbox.put(None)
        self._upload.cancel()
        self._download.cancel()


def _only_dtypes(allowed: set[str], key: TensorKey, dtype: str, shape: tuple[int, ...]) -> None:
    """Refuse an answer announced in a dtype or codec the job does not use (before it is buffered)."""
    if dtype not in allowed:
        raise TensorError("dtype", f"{key} arrived as {dtype}; this job's answers are {' or '.join(sorted(allowed))}")
