"""The one boundary between protobuf messages and the domain's dataclasses and arrays.

Paired ``*_to_proto`` / ``*_from_proto`` functions live here and nowhere else. Tensors are cut
into chunks of at most ``CHUNK_BYTES`` and reassembled by ``TensorAssembler``, which validates
the announced layout before it buffers a byte and never unpickles anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from typing import Any

import numpy as np

from vflcore import work_items
from vflcore.errors import ConfigError, IncompleteStream, JoinRejected
from vflcore.job.privacy import PrivacySpec, check_privacy
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.proto import federation_pb2 as pb
from vflcore.wire import names
from vflcore.wire.codecs import FP32, WireCodec, codec_for_dtype
from vflcore.wire.tensors import (
    CHUNK_BYTES,
    TensorError,
    TensorKey,
    as_wire_array,
    check_header,
    check_values,
)


def key_to_proto(key: TensorKey) -> pb.TensorKey:
    return pb.TensorKey(job_id=key.job_id, round=key.round, batch=key.batch, name=key.name)


def key_from_proto(msg: pb.TensorKey) -> TensorKey:
    return TensorKey(job_id=msg.job_id, round=msg.round, batch=msg.batch, name=msg.name)


def tensor_to_chunks(
    key: TensorKey, array: np.ndarray, chunk_bytes: int = CHUNK_BYTES, wire: WireCodec = FP32
) -> Iterator[pb.TensorChunk]:
    """Cut a tensor into messages of at most ``chunk_bytes`` payload; an empty tensor is one chunk.

    A float32 tensor is sent in the ``wire`` codec (``vflcore.wire.codecs``): its payload, and the
    codec's name in ``dtype``; the shape is the tensor's own. Any other dtype is sent as it is.
    """
    arr = as_wire_array(array)
    if wire.lossless or arr.dtype != np.float32:
        payload = arr.data.cast("B") if arr.size else memoryview(b"")
        dtype = arr.dtype.name
    else:
        payload, dtype = memoryview(wire.encode(arr)), wire.dtype
    header = {
        "key": key_to_proto(key),
        "dtype": dtype,
        "shape": list(arr.shape),
        "total_bytes": payload.nbytes,
    }
    offset = 0
    while True:
        end = min(offset + chunk_bytes, payload.nbytes)
        yield pb.TensorChunk(offset=offset, data=payload[offset:end].tobytes(), **header)  # type: ignore[arg-type]
        offset = end
        if offset >= payload.nbytes:
            return


#: Checks a tensor's announced key, dtype and shape against what the receiver expects; raises
#: TensorError naming the field. Called on the first chunk, before any buffer is allocated.
Announcement = Callable[[TensorKey, str, tuple[int, ...]], None]


class TensorAssembler:
    """Rebuilds one tensor from its chunks, refusing anything inconsistent or oversized.

    A tensor that fits one chunk (every training tensor of a usual batch does) is used as the
    chunk's bytes, without a second buffer and copy. The array is then read-only, like any
    array received from a peer should be treated. With ``expect``, the first chunk's key,
    dtype and shape must be what the receiver waits for before a byte is buffered: a chunk
    that announces 1 GiB for a tensor of 4 KiB allocates nothing.
    """

    def __init__(self, expect: Announcement | None = None) -> None:
        self._expect = expect
        self._key: TensorKey | None = None
        self._dtype = ""
        self._shape: tuple[int, ...] = ()
        self._total = -1  # announced payload size; -1 until the first chunk
        self._whole: bytes | None = None  # the payload, when one chunk carried all of it
        self._buffer: bytearray | None = None  # else the payload, filled chunk by chunk
        self._filled = 0

    def add(self, chunk: pb.TensorChunk) -> None:
        shape = tuple(int(d) for d in chunk.shape)
        if self._total < 0:
            check_header(chunk.dtype, shape, chunk.total_bytes)
            key = key_from_proto(chunk.key)
            if self._expect is not None:
                self._expect(key, chunk.dtype, shape)
            self._key = key
            self._dtype, self._shape, self._total = chunk.dtype, shape, chunk.total_bytes
        elif (key_from_proto(chunk.key), chunk.dtype, shape) != (self._key, self._dtype, self._shape):
            raise TensorError("key", "chunks of one stream must all carry the same key, dtype and shape")
        if chunk.offset != self._filled:
            raise TensorError("offset", f"chunk at offset {chunk.offset}, expected {self._filled}")
        data = chunk.data
        end = self._filled + len(data)
        if end > self._total:
            raise TensorError("data", f"chunks carry more than the announced {self._total} bytes")
        if self._filled == 0 and end == self._total:
            self._whole = data
        else:
            if self._buffer is None:
                self._buffer = bytearray(self._total)
            self._buffer[self._filled : end] = data
        self._filled = end

    @property
    def complete(self) -> bool:
        """Every announced byte has arrived (an empty tensor is complete with its first chunk)."""
        return self._filled == self._total

    def result(self) -> tuple[TensorKey, np.ndarray]:
        """The key and the validated array; raises if the stream was empty or truncated."""
        if self._total < 0 or self._key is None:
            raise IncompleteStream("chunks", "the stream carried no tensor")
        if self._filled != self._total:
            raise IncompleteStream("data", f"truncated: got {self._filled} of {self._total} bytes")
        payload = self._whole if self._whole is not None else self._buffer or b""
        wire = codec_for_dtype(self._dtype)
        if wire is not None:  # decoded to float32 and checked as strictly (``WireCodec.decode``)
            return self._key, wire.decode(payload, self._shape)
        array = np.frombuffer(payload, dtype=np.dtype(self._dtype).newbyteorder("<")).reshape(self._shape)
        check_values(array)
        return self._key, array


def tensor_from_chunks(
    chunks: Iterable[pb.TensorChunk], expect: Announcement | None = None
) -> tuple[TensorKey, np.ndarray]:
    """Assemble and validate a chunk stream that carries exactly one tensor."""
    assembler = TensorAssembler(expect)
    for chunk in chunks:
        assembler.add(chunk)
    return assembler.result()


def tensors_from_chunks(
    chunks: Iterable[pb.TensorChunk], expect: Announcement | None = None
) -> Iterator[tuple[TensorKey, np.ndarray]]:
    """Assemble a stream of tensors sent back to back; yield each, validated, as soon as it is whole.

    A tensor ends when its announced bytes have all arrived, and the next chunk must then start a
    new tensor at offset 0. A stream that ends inside a tensor, or carries none, is refused.
    """
    assembler = TensorAssembler(expect)
    for chunk in chunks:
        if assembler.complete:
            if chunk.offset != 0:
                raise TensorError("data", "chunks carry more than the announced bytes of the tensor before")
            assembler = TensorAssembler(expect)
        assembler.add(chunk)
        if assembler.complete:
            yield assembler.result()
    if not assembler.complete:
        assembler.result()  # raises: the stream was empty or ended inside a tensor


def job_to_proto(job: JobSpec) -> pb.JobSpec:
    """Every JobSpec field under its own name; the algorithm options as JSON, tuples as repeated fields."""
    values: dict[str, Any] = {}
    for spec in fields(JobSpec):
        value = getattr(job, spec.name)
        if spec.name == "algorithm_options":
            values[spec.name] = job.options_json()
        elif spec.name == "privacy":
            values[spec.name] = pb.PrivacySpec(**job.privacy.as_dict())
        elif value is not None:  # None: an optional field left absent (a role's optimizer as the job's)
            values[spec.name] = _to_wire(value)
    return pb.JobSpec(**values)


def job_from_proto(msg: pb.JobSpec) -> JobSpec:
    """The inverse of ``job_to_proto``; malformed algorithm options are refused by name."""
    try:
        options = json.loads(msg.algorithm_options) if msg.algorithm_options else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"job.algorithm_options is not valid JSON: {exc}") from exc
    values: dict[str, Any] = {"algorithm_options": options, "privacy": _privacy_from_proto(msg)}
    for spec in fields(JobSpec):
        if spec.default is None and not msg.HasField(spec.name):
            values[spec.name] = None
        elif spec.name not in values:
            value = getattr(msg, spec.name)
            values[spec.name] = tuple(value) if isinstance(spec.default, tuple) else value
    try:
        return JobSpec(**values)
    except ConfigError as exc:  # every key's rule runs when the job is made: a server that skipped them
        raise JoinRejected(f"the server's job breaks a rule: {exc}; this party refuses the job") from None


def _privacy_from_proto(msg: pb.JobSpec) -> PrivacySpec:
    """The job's defences; a job from a peer that sends none has none. Checked like a config's ``[privacy]``."""
    if not msg.HasField("privacy"):
        return PrivacySpec()
    try:
        spec = PrivacySpec(**{f.name: getattr(msg.privacy, f.name) for f in fields(PrivacySpec)})
        check_privacy(spec, "job from the server")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    return spec


def _to_wire(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def position_to_proto(position: Position) -> pb.Position:
    return pb.Position(epoch=position.epoch, batch=position.batch)


def position_from_proto(msg: pb.Position) -> Position:
    return Position(msg.epoch, msg.batch)


def held_out_to_proto(rows: np.ndarray) -> pb.HoldOut:
    """Held-out row positions as one bit per aligned row: 1.25 MB for 10M rows, where a list would be megabytes more."""
    rows = np.asarray(rows, dtype=np.int64)
    num_rows = int(rows.max()) + 1 if len(rows) else 0
    mask = np.zeros(num_rows, dtype=bool)
    mask[rows] = True
    return pb.HoldOut(rows=np.packbits(mask).tobytes(), num_rows=num_rows)


def held_out_from_proto(msg: pb.HoldOut) -> np.ndarray:
    """The positions ``held_out_to_proto`` packed; ValueError if the bits and the count disagree."""
    if len(msg.rows) != (msg.num_rows + 7) // 8:
        raise ValueError(f"hold_out: {len(msg.rows)} bytes cannot hold the bits of {msg.num_rows} rows")
    bits = np.unpackbits(np.frombuffer(msg.rows, dtype=np.uint8), count=msg.num_rows)
    return np.flatnonzero(bits).astype(np.int64)


def task_to_proto(task: work_items.Task) -> pb.Task:
    match task:
        case work_items.Align(task_id, key, run_psi, plan):
            align = pb.Align(alignment_key=key, run_psi=run_psi)
            if plan is not None:
                align.chunk_ids, align.server_ids, align.resume = plan.chunk_ids, plan.server_ids, plan.resume
                align.upload_from, align.download_from = plan.upload_from, plan.download_from
            return pb.Task(task_id=task_id, align=align)
        case work_items.TrainEpoch(task_id, epoch, first_batch):
            return pb.Task(task_id=task_id, train_epoch=pb.TrainEpoch(epoch=epoch, first_batch=first_batch))
        case work_items.Evaluate(task_id, epoch, rows):
            return pb.Task(task_id=task_id, evaluate=pb.Evaluate(epoch=epoch, rows=rows.tolist()))
        case work_items.Infer(task_id, request_id, rows):
            return pb.Task(task_id=task_id, infer=pb.Infer(request_id=request_id, rows=rows.tolist()))
        case work_items.Share(task_id, round_, names.HEAD):  # the only tensor the protocol asks for
            return pb.Task(task_id=task_id, share_head=pb.ShareHead(round=round_))
        case work_items.Checkpoint(task_id, position, best):
            checkpoint = pb.Checkpoint(position=position_to_proto(position))
            if best is not None:
                checkpoint.best.CopyFrom(position_to_proto(best))
            return pb.Task(task_id=task_id, checkpoint=checkpoint)
        case work_items.Restore(task_id, position, serve):
            return pb.Task(task_id=task_id, restore=pb.Restore(position=position_to_proto(position), serve=serve))
        case work_items.HoldOut(task_id, rows):
            return pb.Task(task_id=task_id, hold_out=held_out_to_proto(rows))
        case work_items.Finish(task_id, success, message, rejoin):
            return pb.Task(task_id=task_id, finish=pb.Finish(success=success, message=message, rejoin=rejoin))
    raise TypeError(f"not a task the protocol can carry: {task!r}")


def task_from_proto(msg: pb.Task) -> work_items.Task:
    kind = msg.WhichOneof("kind")
    if kind == "align":
        a = msg.align
        plan = (  # a plan always has chunks of at least one ID: 0 means the server sent none
            work_items.PsiPlan(a.chunk_ids, a.server_ids, a.resume, a.upload_from, a.download_from)
            if a.chunk_ids
            else None
        )
        return work_items.Align(msg.task_id, bytes(a.alignment_key), a.run_psi, plan)
    if kind == "train_epoch":
        return work_items.TrainEpoch(msg.task_id, msg.train_epoch.epoch, msg.train_epoch.first_batch)
    if kind == "evaluate":
        return work_items.Evaluate(msg.task_id, msg.evaluate.epoch, np.asarray(msg.evaluate.rows, dtype=np.int64))
    if kind == "infer":
        return work_items.Infer(msg.task_id, msg.infer.request_id, np.asarray(msg.infer.rows, dtype=np.int64))
    if kind == "share_head":
        return work_items.Share(msg.task_id, msg.share_head.round, names.HEAD)
    if kind == "checkpoint":
        c = msg.checkpoint
        best = position_from_proto(c.best) if c.HasField("best") else None
        return work_items.Checkpoint(msg.task_id, position_from_proto(c.position), best)
    if kind == "restore":
        return work_items.Restore(msg.task_id, position_from_proto(msg.restore.position), msg.restore.serve)
    if kind == "hold_out":
        return work_items.HoldOut(msg.task_id, held_out_from_proto(msg.hold_out))
    if kind == "finish":
        return work_items.Finish(msg.task_id, msg.finish.success, msg.finish.message, msg.finish.rejoin)
    raise ValueError(f"task {msg.task_id} has no kind this client understands ({kind!r}); upgrade the client")
