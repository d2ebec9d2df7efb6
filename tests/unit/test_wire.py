"""Tensors on the wire: chunking, reassembly and the checks on what a peer sends."""

from __future__ import annotations

import numpy as np
import pytest

from vflcore import tasks, wire
from vflcore.job import JobSpec
from vflcore.tensors import CHUNK_BYTES, TensorError, TensorKey

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


class TestSerde:
    def test_job_round_trip(self) -> None:
        """Every job field, options included, survives the proto boundary."""
        job = JobSpec(job_id="j", seed=5, bottom_hidden=(8, 4), passive_parties=(2, 5), algorithm_options={"q": 3})
        assert wire.job_from_proto(wire.job_to_proto(job)) == job

    @pytest.mark.parametrize(
        "task",
        [
            tasks.TrainEpoch(1, 4),
            tasks.Finish(2, False, "bye"),
        ],
    )
    def test_simple_task_round_trip(self, task: tasks.Task) -> None:
        """Tasks without arrays come back equal."""
        assert wire.task_from_proto(wire.task_to_proto(task)) == task

    def test_row_tasks_round_trip(self) -> None:
        """Evaluate and Infer keep their row positions."""
        rows = np.array([3, 1, 4], dtype=np.int64)
        back = wire.task_from_proto(wire.task_to_proto(tasks.Infer(9, "req", rows)))
        assert isinstance(back, tasks.Infer) and back.request_id == "req" and np.array_equal(back.rows, rows)
        back_eval = wire.task_from_proto(wire.task_to_proto(tasks.Evaluate(9, 2, rows)))
        assert isinstance(back_eval, tasks.Evaluate) and np.array_equal(back_eval.rows, rows)
