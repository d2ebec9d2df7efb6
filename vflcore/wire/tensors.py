"""Tensors as they cross the wire: keys, the dtype allow-list, and validation of what a peer sent.

A received tensor is untrusted input. It is checked here, before it can touch training state:
the dtype must be on the allow-list, the byte count must match dtype and shape, the shape must
match what the receiver expects, and every value must be finite. A failure raises
``TensorError`` naming the field, which the servicer turns into INVALID_ARGUMENT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcore.errors import TensorError as TensorError  # re-exported: defined in vflcore.errors
from vflcore.wire.codecs import codec_for_dtype

# Floats for representations and gradients, int64 for row positions, uint8 for PSI's blinded
# curve points. Nothing else is needed, and a short list keeps a hostile peer from steering us
# into odd code paths.
ALLOWED_DTYPES: frozenset[str] = frozenset({"float32", "float64", "int64", "uint8"})

# Tensors are cut into chunks of this size: large enough to stay fast (BRIEF: 64 KiB chunks are
# 3x slower than 1 MiB ones), small enough that no message meets gRPC's 4 MiB default limit.
CHUNK_BYTES = 1 << 20

# A single tensor larger than this is refused before any memory is allocated for it.
MAX_TENSOR_BYTES = 1 << 30


@dataclass(frozen=True, order=True)
class TensorKey:
    """Names one tensor of one exchange: (job, round, batch, name)."""

    job_id: str
    round: int
    batch: int
    name: str

    def with_name(self, name: str) -> TensorKey:
        """The key of the answer to this tensor, e.g. the gradient for an embedding."""
        return TensorKey(self.job_id, self.round, self.batch, name)

    def __str__(self) -> str:
        return f"{self.name}[job={self.job_id} round={self.round} batch={self.batch}]"


def expected_nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes a C-ordered tensor of this dtype and shape occupies."""
    count = 1
    for dim in shape:
        count *= dim
    return count * np.dtype(dtype).itemsize


def check_header(dtype: str, shape: tuple[int, ...], total_bytes: int) -> None:
    """Validate a tensor's announced layout before any of its payload is buffered.

    ``dtype`` is a plain dtype of the allow-list, or a wire codec's name (``vflcore.wire.codecs``),
    whose payload size follows from the shape just as exactly.
    """
    wire = codec_for_dtype(dtype)
    if dtype not in ALLOWED_DTYPES and wire is None:
        raise TensorError("dtype", f"{dtype!r} is not allowed; use one of {sorted(ALLOWED_DTYPES)} or a wire codec")
    if any(dim < 0 for dim in shape):
        raise TensorError("shape", f"{list(shape)} has a negative dimension")
    want = expected_nbytes(dtype, shape) if wire is None else wire.payload_bytes(shape)
    decoded = want if wire is None else expected_nbytes("float32", shape)  # top-k's payload can be tiny
    if max(want, decoded) > MAX_TENSOR_BYTES:
        raise TensorError(
            "shape", f"{list(shape)} of {dtype} is {max(want, decoded)} bytes, over the {MAX_TENSOR_BYTES} limit"
        )
    if total_bytes != want:
        raise TensorError("total_bytes", f"{total_bytes} does not match shape {list(shape)} of {dtype} ({want} bytes)")


def check_values(array: np.ndarray, *, field: str = "data") -> None:
    """Refuse NaN and infinity: one of them would poison every parameter it touches."""
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise TensorError(field, f"{bad} value(s) are NaN or infinite; only finite values are accepted")


def check_shape(array: np.ndarray, expected: tuple[int, ...], *, what: str) -> None:
    """The tensor must have exactly the shape the receiver agreed to (batch rows x width)."""
    if tuple(array.shape) != tuple(expected):
        raise TensorError("shape", f"{what} has shape {list(array.shape)}, expected {list(expected)}")


def as_wire_array(array: np.ndarray) -> np.ndarray:
    """Little-endian, C-ordered, allowed dtype: the only layout that goes on the wire."""
    arr = np.ascontiguousarray(array)
    if arr.dtype.name not in ALLOWED_DTYPES:
        raise TensorError("dtype", f"{arr.dtype.name} cannot be sent; use one of {sorted(ALLOWED_DTYPES)}")
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr
