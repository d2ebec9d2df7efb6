"""Malformed tensors from a passive party: each is refused with INVALID_ARGUMENT, nothing changes.

The test plays party 2 with raw stubs over real mTLS against a real server whose job is waiting
for batch 0 of epoch 0; party 3 is an honest ``PassiveParty`` in a thread. Every bad upload must
be refused with a message naming the field, must leave the server's model and party 2's side of
the mailbox untouched, and a good upload afterwards must still work. Once party 2 turns honest,
the job finishes, and so does party 3.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import grpc
import numpy as np
import pytest
import torch

from vflclient import Connection, RunResult, TensorRejected, read_party_csv
from vflclient._alignment import align_passive
from vflcore.job.spec import JobSpec
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.security.tls import channel_credentials
from vflcore.wire import serde as wire
from vflcore.wire.codecs import parse_codec
from vflcore.wire.names import EVAL_EMBEDDING, infer_embedding_name
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Align, Evaluate, Finish, Infer, Restore, Task, TrainEpoch
from vfltesting.in_process import RunningJob, run_party_in_thread, start_job, stop_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration

WIDTH = SMALL_JOB.embedding_dim


def _chunks_with(key: TensorKey, array: np.ndarray, **override: object) -> Iterator[pb.TensorChunk]:
    for chunk in wire.tensor_to_chunks(key, array):
        for field, value in override.items():
            if field == "data":
                chunk.data = value  # type: ignore[assignment]
            elif field == "shape":
                del chunk.shape[:]
                chunk.shape.extend(value)  # type: ignore[arg-type]
            else:
                setattr(chunk, field, value)
        yield chunk


class Session(NamedTuple):
    running: RunningJob
    stub: pb_grpc.FederationStub
    key: TensorKey
    rows: int
    connection: Connection
    tasks: Iterator[Task]
    party3: Callable[[], RunResult | BaseException]


@pytest.fixture
def party2_session(
    request: pytest.FixtureRequest, job_factory, pki: Pki, digits_data: Path, tmp_path: Path
) -> Iterator[Session]:
    """A job for parties 2 and 3: party 3 honest in a thread, party 2 joined and subscribed by hand.

    Indirect parametrisation sets the server's ``step_timeout_s`` (default 60).
    """
    step_timeout_s = getattr(request, "param", 60.0)
    yield from _session(job_factory, pki, digits_data, tmp_path, replace(SMALL_JOB, epochs=1), step_timeout_s)


@pytest.fixture
def codec_session(
    request: pytest.FixtureRequest, job_factory, pki: Pki, digits_data: Path, tmp_path: Path
) -> Iterator[Session]:
    """``party2_session`` for a job whose wire codec is the indirect parameter (``[job] wire_codec``)."""
    job = replace(SMALL_JOB, epochs=1, wire_codec=request.param)
    yield from _session(job_factory, pki, digits_data, tmp_path, job, 60.0)


@pytest.fixture(scope="module")
def shared_session(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """``party2_session`` shared by the module's refusal cases (those of ``TestMalformedTensors``, the 1 GiB
    chunk, a ReturnGradients count too large, a second Subscribe).

    Each case is refused and must change nothing, so the next case finds the job as the first did,
    and a case that did change something fails the cases after it too. One session instead of one
    per case: a job start, a join and a PSI run fewer per case (~1.2 CPU-s each, 2026-11-29).
    """
    yield from _shared(pki, digits_data, tmp_path_factory.mktemp("shared"), replace(SMALL_JOB, epochs=1))


@pytest.fixture(scope="class")
def shared_codec_session(
    request: pytest.FixtureRequest, pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    """``shared_session`` for a job whose wire codec is the indirect parameter: one per codec."""
    job = replace(SMALL_JOB, epochs=1, wire_codec=request.param)
    yield from _shared(pki, digits_data, tmp_path_factory.mktemp("shared-codec"), job)


def _shared(pki: Pki, digits_data: Path, tmp: Path, job: JobSpec) -> Iterator[Session]:
    """``_session`` on a job this fixture stops itself at teardown (``job_factory`` is per test)."""
    started: list[RunningJob] = []

    def make(job: JobSpec, **kwargs: object) -> RunningJob:
        running = start_job(pki, digits_data, tmp, job, **kwargs)  # type: ignore[arg-type]
        started.append(running)
        return running

    try:
        # A generous step timeout: the cases all run inside the job's wait for batch 0.
        yield from _session(make, pki, digits_data, tmp, job, 600.0)
    finally:
        for running in started:
            stop_job(running)


def _session(
    job_factory, pki: Pki, digits_data: Path, tmp_path: Path, job: JobSpec, step_timeout_s: float
) -> Iterator[Session]:
    running: RunningJob = job_factory(job, step_timeout_s=step_timeout_s)
    party3 = run_party_in_thread(running, pki, digits_data, tmp_path / "party-3", 3)
    # Join and align through the SDK, as a real party would; then speak raw protobuf.
    connection = Connection(running.address, 2, tls=pki.party_files(2), connect_timeout_s=20)
    table = read_party_csv(digits_data / "party2.csv")
    connection.join(table)
    tasks = connection.tasks("test-job")
    align = next(tasks)
    assert isinstance(align, Align)
    align_passive(table, "test-job", align, connection, cache_dir=tmp_path / "psi")
    assert isinstance(next(tasks), Restore)  # a new job starts afresh: Position(0, 0)
    assert isinstance(next(tasks), TrainEpoch)
    channel = grpc.secure_channel(running.address, channel_credentials(pki.party_files(2)))
    stub = pb_grpc.FederationStub(channel)
    rows = len(running.active.schedule.batches(0)[0])
    yield Session(running, stub, TensorKey("test-job", 0, 0, "embedding"), rows, connection, tasks, party3)
    connection.close()
    channel.close()


def _finish_honestly(session: Session) -> None:
    """Party 2 turns honest: zero embeddings for every batch, evaluation and inference, until Finish."""
    batches = session.running.active.schedule.batches(0)
    with session.connection.exchange("test-job", 0, len(batches), up="embedding", down="gradient") as exchange:
        for b, rows in enumerate(batches):
            exchange.send(b, np.zeros((len(rows), WIDTH), np.float32))
            exchange.receive(b)
    for task in session.tasks:
        match task:
            case Evaluate(_, epoch, rows):
                key = TensorKey("test-job", epoch, 0, EVAL_EMBEDDING)
                session.connection.send(key, np.zeros((len(rows), WIDTH), np.float32))
            case Infer(_, request_id, rows):
                key = TensorKey("test-job", 0, 0, infer_embedding_name(request_id))
                session.connection.send(key, np.zeros((len(rows), WIDTH), np.float32))
            case Finish():
                return


def _bad_uploads(key: TensorKey, good: np.ndarray) -> dict[str, Iterator[pb.TensorChunk]]:
    """Every malformed upload of batch ``key``, by case name; ``good`` is a valid embedding of it."""
    rows = len(good)
    return {
        "wrong_shape": wire.tensor_to_chunks(key, good[:-1]),
        "wrong_width": wire.tensor_to_chunks(key, np.zeros((rows, WIDTH + 1), np.float32)),
        "wrong_dtype": wire.tensor_to_chunks(key, good.astype(np.float64)),
        "unknown_dtype": _chunks_with(key, good, dtype="float16", total_bytes=good.size * 2),
        "nan": wire.tensor_to_chunks(key, np.where(good > 1, np.nan, good).astype(np.float32)),
        "infinite": wire.tensor_to_chunks(key, np.where(good > 1, np.inf, good).astype(np.float32)),
        "truncated": _chunks_with(key, good, data=good.tobytes()[:-7]),
        "oversize": _chunks_with(key, good, shape=[1 << 20, 1 << 12], total_bytes=(1 << 32)),
        "one_gib": _chunks_with(key, good, shape=[1 << 28], total_bytes=1 << 30),
        "more_bytes_than_announced": _chunks_with(key, good, data=good.tobytes() + b"\0" * 8),
        "wrong_job": wire.tensor_to_chunks(replace(key, job_id="other-job"), good),
        "unexpected_batch": wire.tensor_to_chunks(replace(key, batch=999), good),
    }


def _model_snapshot(running: RunningJob) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in running.active.algorithm.top.state_dict().items()}


class TestMalformedTensors:
    @pytest.mark.parametrize(
        ("case", "field"),
        [
            ("wrong_shape", "shape"),
            ("wrong_width", "shape"),
            ("wrong_dtype", "dtype"),
            ("unknown_dtype", "dtype"),
            ("nan", "data"),
            ("infinite", "data"),
            ("truncated", "data"),
            ("oversize", "shape"),
            ("one_gib", "shape"),
            ("more_bytes_than_announced", "data"),
            ("wrong_job", "key.job_id"),
            ("unexpected_batch", "key"),
        ],
    )
    def test_bad_upload_is_refused_and_changes_nothing(self, shared_session: Session, case: str, field: str) -> None:
        """The upload gets INVALID_ARGUMENT naming the field, and the model and mailbox are unchanged."""
        running, stub, key, rows = shared_session[:4]
        good = np.random.default_rng(0).standard_normal((rows, WIDTH)).astype(np.float32)
        bad = _bad_uploads(key, good)
        before = _model_snapshot(running)
        with pytest.raises(grpc.RpcError) as caught:
            stub.SendEmbeddings(bad[case], timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith(field), caught.value.details()
        assert running.active.parties.uploads.mailbox.keys_of(2) == []  # party 3's honest upload may wait there
        assert running.active.algorithm.step_losses == []
        after = _model_snapshot(running)
        assert all(torch.equal(before[k], after[k]) for k in before)

    def test_a_chunk_announcing_one_gib_is_refused_before_anything_is_allocated(self, shared_session: Session) -> None:
        """The announced shape is checked against the expected one first: the server allocates nothing for it.

        The server runs in this process, so tracemalloc sees every Python allocation of the call:
        its peak stays far below the 1 GiB the chunk announced (it was 1 GiB, zero-filled, before).
        """
        _, stub, key, rows = shared_session[:4]
        good = np.zeros((rows, WIDTH), np.float32)
        tracemalloc.start()
        try:
            with pytest.raises(grpc.RpcError) as caught:
                stub.SendEmbeddings(_chunks_with(key, good, shape=[1 << 28], total_bytes=1 << 30), timeout=10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == f"shape: {key} has shape [268435456], expected [{rows}, {WIDTH}]"
        assert peak < 64 << 20, f"{peak} bytes allocated at the peak"

    def test_good_upload_after_bad_ones_still_trains(self, party2_session) -> None:
        """After refused uploads, a valid embedding is accepted and its gradient comes back."""
        running, stub, key, rows = party2_session[:4]
        good = np.random.default_rng(1).standard_normal((rows, WIDTH)).astype(np.float32)
        with pytest.raises(grpc.RpcError):
            stub.SendEmbeddings(wire.tensor_to_chunks(key, good[:, :-1]), timeout=10)
        ack = stub.SendEmbeddings(wire.tensor_to_chunks(key, good), timeout=10)
        assert ack.bytes_received == good.nbytes
        got_key, grad = wire.tensor_from_chunks(
            stub.ReturnGradients(pb.TensorRequest(key=wire.key_to_proto(key.with_name("gradient"))), timeout=30)
        )
        assert got_key == key.with_name("gradient")
        assert grad.shape == (rows, WIDTH) and grad.dtype == np.float32
        deadline = time.monotonic() + 10  # the server records the loss just after publishing the gradient
        while not running.active.algorithm.step_losses and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(running.active.algorithm.step_losses) == 1


class TestTheOtherParty:
    def test_it_finishes_after_every_malformed_upload(self, party2_session: Session) -> None:
        """Party 2 sends every malformed tensor, each refused; then it turns honest and both parties finish."""
        session = party2_session
        good = np.random.default_rng(3).standard_normal((session.rows, WIDTH)).astype(np.float32)
        for case, chunks in _bad_uploads(session.key, good).items():
            with pytest.raises(grpc.RpcError) as caught:
                session.stub.SendEmbeddings(chunks, timeout=10)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
        assert session.running.active.algorithm.step_losses == []
        _finish_honestly(session)
        result = session.party3()
        assert isinstance(result, RunResult) and result.success, result
        summary = session.running.summary()
        assert len(summary.epochs) == 1 and session.running.active.parties.state == "finished"


class TestEpochStreams:
    """One SendEmbeddings stream carries a whole epoch; ReturnGradients answers it batch by batch."""

    def test_bad_tensor_mid_stream_keeps_the_ones_before(self, party2_session) -> None:
        """Batch 0 is accepted and answered; the NaN batch 1 after it is refused and not stored."""
        running, stub, key, rows = party2_session[:4]
        assert len(running.active.schedule.batches(0)) >= 2
        good = np.random.default_rng(2).standard_normal((rows, WIDTH)).astype(np.float32)
        bad_key = replace(key, batch=1)
        stream = [*wire.tensor_to_chunks(key, good), *wire.tensor_to_chunks(bad_key, np.full_like(good, np.nan))]
        with pytest.raises(grpc.RpcError) as caught:
            stub.SendEmbeddings(iter(stream), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("data"), caught.value.details()
        gradients = stub.ReturnGradients(
            pb.TensorRequest(key=wire.key_to_proto(key.with_name("gradient")), count=1), timeout=30
        )
        assert [k.batch for k, _ in wire.tensors_from_chunks(gradients)] == [0]
        assert not running.active.parties.uploads.mailbox.has(2, bad_key)

    def test_refused_upload_surfaces_as_the_reason_in_the_exchange(self, party2_session, pki: Pki) -> None:
        """The SDK's exchange raises the server's refusal (TensorRejected, naming the field), not a cancel."""
        running, _, _, rows = party2_session[:4]
        with (
            Connection(running.address, 2, tls=pki.party_files(2), connect_timeout_s=20) as connection,
            pytest.raises(TensorRejected, match="dtype"),
            connection.exchange("test-job", 0, 2, up="embedding", down="gradient") as exchange,
        ):
            exchange.send(0, np.zeros((rows, WIDTH), np.float64))
            exchange.receive(0)
        assert running.active.algorithm.step_losses == []

    def test_too_many_tensors_asked_for_is_refused(self, shared_session: Session) -> None:
        _, stub, key, _ = shared_session[:4]
        request = pb.TensorRequest(key=wire.key_to_proto(key.with_name("gradient")), count=(1 << 20) + 1)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.ReturnGradients(request, timeout=10))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("count")


class TestCallLimits:
    def test_a_second_subscribe_stream_is_refused(self, shared_session: Session) -> None:
        _, stub, _, _ = shared_session[:4]
        with pytest.raises(grpc.RpcError) as caught:
            next(iter(stub.Subscribe(pb.SubscribeRequest(job_id="test-job"), timeout=10)))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "party 2 already has a Subscribe stream open" in caught.value.details()

    @pytest.mark.parametrize("party2_session", [2.0], indirect=True)
    def test_a_wait_for_a_key_never_published_ends_at_the_step_timeout(self, party2_session: Session) -> None:
        """A download of a gradient nobody will publish holds its call for step_timeout_s (2 s here), no longer.

        The job's own wait for party 2's upload times out too and fails the job, which wakes every
        waiter: whichever comes first, the call ends with DEADLINE_EXCEEDED or ABORTED.
        """
        _, stub, key, _ = party2_session[:4]
        never = pb.TensorRequest(key=wire.key_to_proto(replace(key, batch=7).with_name("gradient")))
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.ReturnGradients(never, timeout=60))
        assert caught.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED), caught.value
        assert time.monotonic() - started < 30, "the wait outlived the step timeout by far"

    def test_a_party_may_not_hold_more_than_its_calls(self, party2_session) -> None:
        """16 calls in flight (its Subscribe and 15 downloads that wait): the 17th is RESOURCE_EXHAUSTED.

        The downloads wait for gradients nobody will publish; once they are cancelled, the party
        may call again. A download can itself be refused, or end, before the server counts it (a
        heartbeat held a place as it arrived; the connection was reset): any download that has
        ended is replaced, so the calls pile up to the limit on any machine, however fast,
        instead of relying on the 15 all arriving first.
        """
        _, stub, key, _ = party2_session[:4]
        never = pb.TensorRequest(key=wire.key_to_proto(replace(key, batch=7).with_name("gradient")))
        waiting = [stub.ReturnGradients(never, timeout=60) for _ in range(15)]
        ended: list[str] = []
        try:
            deadline = time.monotonic() + 30
            while True:
                for i, call in enumerate(waiting):
                    if call.done():
                        ended.append(f"{call.code()}: {call.details()}")
                        waiting[i] = stub.ReturnGradients(never, timeout=60)
                try:
                    stub.Heartbeat(pb.HeartbeatRequest(job_id="test-job"), timeout=10)
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                    assert "party 2 has 16 calls in flight" in exc.details()
                    assert "[server] max_party_rpcs" in exc.details()
                    break
                assert time.monotonic() < deadline, f"the 17th call was never refused; downloads that ended: {ended}"
                threading.Event().wait(0.05)
        finally:
            for call in waiting:
                call.cancel()
        deadline = time.monotonic() + 20
        while True:
            try:
                stub.Heartbeat(pb.HeartbeatRequest(job_id="test-job"), timeout=10)
                break
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline, exc
                threading.Event().wait(0.05)


def _encoded(key: TensorKey, good: np.ndarray, codec: str, edit: Callable[[bytearray], None]) -> list[pb.TensorChunk]:
    """``good`` encoded in ``codec``, its payload then changed by ``edit``: one chunk, as the sender cut it."""
    (chunk,) = wire.tensor_to_chunks(key, good, wire=parse_codec(codec))
    payload = bytearray(chunk.data)
    edit(payload)
    chunk.data = bytes(payload)
    chunk.total_bytes = len(payload)
    return [chunk]


def _set(offset: int, value: bytes) -> Callable[[bytearray], None]:
    def edit(payload: bytearray) -> None:
        payload[offset : offset + len(value)] = value

    return edit


class TestMalformedEncodedTensors:
    """In a job with a wire codec, a payload that breaks the codec's rules is refused like a malformed float32."""

    @pytest.mark.parametrize(
        ("shared_codec_session", "sent_as", "edit", "field"),
        [
            ("int8", "int8", _set(0, np.float32(-1).tobytes()), "data"),  # a negative row scale
            ("int8", "int8", _set(0, np.float32(np.nan).tobytes()), "data"),  # a NaN row scale
            ("int8", "int8", lambda p: p.__delitem__(slice(-1, None)), "total_bytes"),  # one byte short
            ("int8", "bf16", lambda p: None, "dtype"),  # a codec the job does not use
            ("topk:0.5", "topk:0.5", _set(0, np.uint32(1 << 20).tobytes()), "data"),  # an index past the row
            ("topk:0.5", "topk:0.5", _set(4, np.uint32(0).tobytes()), "data"),  # indices not increasing
        ],
        indirect=["shared_codec_session"],
        # class scope: one session per codec (2), not per case (6); a row-by-row parametrisation with one
        # indirect name is function-scoped by default, which set the session up again for each case (~1.2 CPU-s)
        scope="class",
    )
    def test_bad_payload_is_refused_and_changes_nothing(
        self, shared_codec_session: Session, sent_as: str, edit: Callable[[bytearray], None], field: str
    ) -> None:
        running, stub, key, rows = shared_codec_session[:4]
        good = np.random.default_rng(0).standard_normal((rows, WIDTH)).astype(np.float32)
        before = _model_snapshot(running)
        with pytest.raises(grpc.RpcError) as caught:
            stub.SendEmbeddings(iter(_encoded(key, good, sent_as, edit)), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith(field), caught.value.details()
        assert running.active.parties.uploads.mailbox.keys_of(2) == []
        after = _model_snapshot(running)
        assert all(torch.equal(before[k], after[k]) for k in before)

    @pytest.mark.parametrize("codec_session", ["int8"], indirect=True)
    def test_a_good_encoded_upload_is_taken(self, codec_session: Session) -> None:
        running, stub, key, rows = codec_session[:4]
        good = np.random.default_rng(0).standard_normal((rows, WIDTH)).astype(np.float32)
        ack = stub.SendEmbeddings(iter(_encoded(key, good, "int8", lambda p: None)), timeout=10)
        assert ack.tensors == 1
        deadline = time.monotonic() + 30  # the server takes it for its first step, with party 3's
        while not running.active.algorithm.step_losses and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(running.active.algorithm.step_losses) == 1
