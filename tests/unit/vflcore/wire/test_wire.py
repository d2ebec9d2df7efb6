"""Tensors on the wire: chunking, reassembly and the checks on what a peer sends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from vflcore import work_items
from vflcore.errors import JoinRejected
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.proto import federation_pb2 as pb
from vflcore.wire import serde as wire
from vflcore.wire.tensors import CHUNK_BYTES, TensorError, TensorKey

KEY = TensorKey("job", 3, 7, "embedding")
GRPC_DEFAULT_LIMIT = 4 * 1024 * 1024


class TestTensorChunks:
    def test_round_trip_is_exact(self) -> None:
        """A tensor comes back bit-identical, with its key."""
        array = np.random.default_rng(0).standard_normal((128, 60)).astype(np.float32)
        key, back = wire.tensor_from_chunks(wire.tensor_to_chunks(KEY, array))
        assert key == KEY and back.dtype == np.float32 and np.array_equal(back, array)

    def test_large_tensor_is_cut_below_the_message_limit(self) -> None:
        """A 10 MB tensor travels as several chunks, each far below gRPC's 4 MiB default."""
        array = np.ones((40_000, 64), dtype=np.float32)
        chunks = list(wire.tensor_to_chunks(KEY, array))
        assert len(chunks) == -(-array.nbytes // CHUNK_BYTES)
        assert max(c.ByteSize() for c in chunks) < GRPC_DEFAULT_LIMIT // 3
        assert np.array_equal(wire.tensor_from_chunks(chunks)[1], array)

    def test_empty_tensor_is_one_chunk(self) -> None:
        """A tensor with no elements still carries its key and shape."""
        chunks = list(wire.tensor_to_chunks(KEY, np.zeros((0, 5), np.float32)))
        assert len(chunks) == 1
        assert wire.tensor_from_chunks(chunks)[1].shape == (0, 5)

    def test_big_endian_input_is_sent_little_endian(self) -> None:
        """The wire is little-endian whatever the sender's array order."""
        array = np.arange(6, dtype=">f4").reshape(2, 3)
        back = wire.tensor_from_chunks(wire.tensor_to_chunks(KEY, array))[1]
        assert np.array_equal(back, array.astype("<f4"))

    def test_reordered_chunks_are_refused(self) -> None:
        """Chunks out of order fail on the offset field."""
        chunks = list(wire.tensor_to_chunks(KEY, np.ones((300_000,), np.float32)))
        with pytest.raises(TensorError, match=r"^offset"):
            wire.tensor_from_chunks([chunks[1], chunks[0], *chunks[2:]])

    def test_empty_stream_is_refused(self) -> None:
        """A stream without chunks is an error, not an empty tensor."""
        with pytest.raises(TensorError, match=r"^chunks"):
            wire.tensor_from_chunks([])

    def test_disallowed_dtype_cannot_be_sent(self) -> None:
        """The sender refuses dtypes the receiver would refuse anyway."""
        with pytest.raises(TensorError, match=r"^dtype"):
            list(wire.tensor_to_chunks(KEY, np.zeros(3, np.complex64)))


class TestTensorStreams:
    """Many tensors back to back on one stream: how a passive party sends a whole epoch."""

    @staticmethod
    def _stream(*arrays: np.ndarray) -> list[pb.TensorChunk]:
        return [c for b, a in enumerate(arrays) for c in wire.tensor_to_chunks(replace(KEY, batch=b), a)]

    def test_each_tensor_comes_out_whole_and_in_order(self) -> None:
        """Small and multi-chunk tensors alike come back exact, keyed by their own batch."""
        rng = np.random.default_rng(1)
        arrays = [rng.standard_normal(shape).astype(np.float32) for shape in [(4, 3), (300_000,), (0, 3), (2, 2)]]
        got = list(wire.tensors_from_chunks(self._stream(*arrays)))
        assert [k.batch for k, _ in got] == [0, 1, 2, 3]
        assert all(np.array_equal(a, b) for (_, a), b in zip(got, arrays, strict=True))

    def test_a_tensor_is_yielded_before_the_stream_ends(self) -> None:
        """The first tensor is available while later chunks are still to come."""

        def chunks() -> Iterator[pb.TensorChunk]:
            yield from wire.tensor_to_chunks(KEY, np.ones(3, np.float32))
            raise AssertionError("read past the first tensor before handing it over")

        key, array = next(wire.tensors_from_chunks(chunks()))
        assert key == KEY and array.tolist() == [1, 1, 1]

    def test_stream_ending_inside_a_tensor_is_refused(self) -> None:
        """A cut-off last tensor fails on the data field; the tensors before it were delivered."""
        chunks = self._stream(np.ones(3, np.float32), np.ones(300_000, np.float32))[:-1]
        arrivals = wire.tensors_from_chunks(chunks)
        assert next(arrivals)[0] == replace(KEY, batch=0)
        with pytest.raises(TensorError, match=r"^data"):
            next(arrivals)

    def test_chunk_continuing_a_finished_tensor_is_refused(self) -> None:
        """After a tensor's last byte, only a new tensor (offset 0) may follow."""
        first, second = self._stream(np.ones(3, np.float32), np.ones(3, np.float32))
        second.offset = 12
        with pytest.raises(TensorError, match=r"^data"):
            list(wire.tensors_from_chunks([first, second]))

    def test_empty_stream_is_refused(self) -> None:
        with pytest.raises(TensorError, match=r"^chunks"):
            list(wire.tensors_from_chunks([]))

    def test_one_chunk_tensor_is_read_only(self) -> None:
        """A received tensor is used in place, not copied, so writing to it is a bug caught early."""
        _, array = wire.tensor_from_chunks(wire.tensor_to_chunks(KEY, np.ones(3, np.float32)))
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 2


class TestSerde:
    def test_job_round_trip(self) -> None:
        """Every job field, options included, survives the proto boundary."""
        job = JobSpec(
            job_id="j",
            seed=5,
            bottom_hidden=(8, 4),
            weight_decay=1e-4,
            passive_parties=(2, 5),
            algorithm_options={"q": 3},
        )
        assert wire.job_from_proto(wire.job_to_proto(job)) == job

    def test_a_job_that_breaks_a_keys_rule_is_refused_as_it_is_read(self) -> None:
        """A server that skipped the rules (an older one) gets the job back in the words of a job file."""
        message = wire.job_to_proto(JobSpec(job_id="credit"))
        message.epochs = 0
        with pytest.raises(JoinRejected, match=r"\[job\] epochs = 0; give a whole number.*this party refuses the job"):
            wire.job_from_proto(message)

    @pytest.mark.parametrize(
        "task",
        [
            work_items.TrainEpoch(1, 4),
            work_items.Finish(2, False, "bye"),
            work_items.Finish(5, False, "paused: party 3 is lost", rejoin=True),
            work_items.Checkpoint(6, Position(4, 0)),
            work_items.Checkpoint(6, Position(3, 17)),
            work_items.Restore(7, Position(2, 0)),
            work_items.Restore(8, Position(0, 0)),
            work_items.Restore(9, Position(3, 17)),
            work_items.TrainEpoch(10, 3, first_batch=17),
            work_items.Share(3, 12, "head"),
            work_items.Align(4, b"key", True),
            work_items.Align(4, b"key", True, work_items.PsiPlan(7, 1797, resume=True, upload_from=3, download_from=2)),
            work_items.Align(4, b"key", False),
        ],
    )
    def test_simple_task_round_trip(self, task: work_items.Task) -> None:
        """Tasks without arrays come back equal."""
        assert wire.task_from_proto(wire.task_to_proto(task)) == task

    def test_row_tasks_round_trip(self) -> None:
        """Evaluate and Infer keep their row positions."""
        rows = np.array([3, 1, 4], dtype=np.int64)
        back = wire.task_from_proto(wire.task_to_proto(work_items.Infer(9, "req", rows)))
        assert isinstance(back, work_items.Infer) and back.request_id == "req" and np.array_equal(back.rows, rows)
        back_eval = wire.task_from_proto(wire.task_to_proto(work_items.Evaluate(9, 2, rows)))
        assert isinstance(back_eval, work_items.Evaluate) and np.array_equal(back_eval.rows, rows)
