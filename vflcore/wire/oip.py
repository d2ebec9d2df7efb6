"""The Open Inference Protocol (KServe v2) as both ends see it: wire names, datatypes, tensor bytes.

The serving endpoints (``vflserver.inference``) and the SDK's ``InferenceClient`` share this module,
so a tensor is laid out one way only: its elements in row-major order, little-endian, without
padding; a BYTES element is a 4-byte little-endian length followed by that many bytes (KServe's
and Triton's layout). The dataclasses are the protocol's messages without protobuf or JSON, so
the gRPC serde (``vflcore.wire.oip_serde``) and the REST one (``vflserver.inference.json_wire``) meet on
the same types. Data from a caller is untrusted: every decoder checks sizes before it copies.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vflcore.errors import ProtocolError as ProtocolError  # re-exported: defined in vflcore.errors

#: The gRPC service name stock clients (tritonclient, KServe) call. Our own proto package differs
#: (see proto/vflcore/proto/open_inference.proto), so handlers are registered under this name.
SERVICE = "inference.GRPCInferenceService"

#: KServe datatype names and the numpy dtypes they travel as (little-endian on the wire).
DATATYPES: dict[str, np.dtype[np.generic]] = {
    "BOOL": np.dtype(np.bool_),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(np.object_),
}

FLOAT_DATATYPES = frozenset({"FP32", "FP64"})

_LENGTH = struct.Struct("<I")

# Which Python types a JSON value or a typed-contents entry may have, per datatype. bool is a
# subclass of int, so the check compares exact types: `true` is not a number here.
_VALUE_TYPES: dict[str, tuple[type, ...]] = {
    "BOOL": (bool,),
    "INT32": (int,),
    "INT64": (int,),
    "FP32": (int, float),
    "FP64": (int, float),
    "BYTES": (str, bytes),
}


def method(name: str) -> str:
    """The full gRPC method path of one RPC, e.g. ``/inference.GRPCInferenceService/ModelInfer``."""
    return f"/{SERVICE}/{name}"


@dataclass(frozen=True)
class TensorMetadata:
    """One input or output a model declares; -1 in ``shape`` marks a dimension of any size."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelMetadata:
    """What ModelMetadata (gRPC) and ``GET /v2/models/{name}`` (REST) answer."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


@dataclass(frozen=True)
class ServerMetadata:
    """What ServerMetadata (gRPC) and ``GET /v2`` (REST) answer."""

    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True)
class RequestTensor:
    """One input as a request carries it, not yet checked against the model.

    The data is either ``raw`` bytes or a flat or nested sequence of ``values`` (gRPC typed
    contents, REST JSON); a tensor with neither has no data, which the server refuses.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | None = None
    values: Sequence[Any] | None = None


@dataclass(frozen=True)
class RequestedOutput:
    """An output the caller asks for; ``binary`` is the REST binary-data extension's choice."""

    name: str
    binary: bool | None = None


@dataclass(frozen=True)
class InferRequest:
    """ModelInfer / ``POST /v2/models/{name}/infer``; no requested outputs means all of them."""

    model: str
    version: str
    id: str
    inputs: tuple[RequestTensor, ...]
    outputs: tuple[RequestedOutput, ...] = ()
    binary_output: bool = False  # REST: the request's parameters.binary_data_output


@dataclass(frozen=True)
class OutputTensor:
    """One output of an answered request, as an array of the declared datatype."""

    name: str
    datatype: str
    array: np.ndarray
    binary: bool = False  # REST: send as binary data after the JSON header


@dataclass(frozen=True)
class InferResponse:
    """The answer to an InferRequest: outputs in the requested (or declared) order."""

    model: str
    version: str
    id: str
    outputs: tuple[OutputTensor, ...]


def element_count(shape: Sequence[int]) -> int:
    """Elements in a tensor of this shape; a negative dimension is a protocol error."""
    count = 1
    for dim in shape:
        if dim < 0:
            raise ProtocolError(f"shape {list(shape)} has a negative dimension")
        count *= dim
    return count


def datatype_of(array: np.ndarray) -> str:
    """The KServe datatype an array travels as; text and bytes arrays become BYTES."""
    kind = array.dtype
    if kind.kind in "OSU":
        return "BYTES"
    for name, dtype in DATATYPES.items():
        if name != "BYTES" and kind == dtype:
            return name
    raise ProtocolError(
        f"dtype {kind} has no Open Inference Protocol datatype here; use one of bool, int32, int64, float32, "
        "float64, or bytes/str"
    )


def array_to_raw(array: np.ndarray, datatype: str) -> bytes:
    """The raw wire bytes of ``array`` as ``datatype`` (row-major, little-endian)."""
    if datatype == "BYTES":
        return encode_bytes_elements(array.reshape(-1).tolist())
    dtype = _numeric_dtype(datatype)
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def array_from_raw(raw: bytes, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A writable array of ``shape`` from raw wire bytes, after checking the byte count."""
    count = element_count(shape)
    if datatype == "BYTES":
        return _object_array(decode_bytes_elements(raw, count), shape)
    dtype = _numeric_dtype(datatype)
    if len(raw) != count * dtype.itemsize:
        raise ProtocolError(
            f"raw data is {len(raw)} bytes, but {datatype} {list(shape)} needs {count * dtype.itemsize} "
            f"({count} elements of {dtype.itemsize} bytes)"
        )
    if datatype == "BOOL":
        flags: np.ndarray = np.frombuffer(raw, dtype=np.uint8).reshape(shape) != 0
        return flags
    # A copy, so the array is writable: torch.from_numpy warns about read-only buffers.
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def array_from_values(values: Sequence[Any], datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` from typed values (flat or nested, row-major), each of the datatype's type."""
    count = element_count(shape)
    flat = _flatten(values)
    if len(flat) != count:
        raise ProtocolError(f"has {len(flat)} values, but shape {list(shape)} needs {count}")
    allowed = _VALUE_TYPES.get(datatype)
    if allowed is None:
        raise ProtocolError(f"datatype {datatype} is not supported; use one of {list(DATATYPES)}")
    for value in flat:
        if type(value) not in allowed:
            raise ProtocolError(f"value {value!r} is not a {datatype} value")
    if datatype == "BYTES":
        # A JSON string may hold a lone surrogate ("\\udcff"): kept as bytes that are not UTF-8,
        # so the model refuses it by position, where a strict encode would fail the whole request.
        return _object_array([v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v for v in flat], shape)
    try:
        with np.errstate(over="ignore"):  # an FP32 overflow becomes inf, which the finiteness check names
            array: np.ndarray = np.array(flat, dtype=DATATYPES[datatype]).reshape(shape)
    except OverflowError as exc:
        raise ProtocolError(f"a value does not fit {datatype}: {exc}") from None
    return array


def encode_bytes_elements(items: Iterable[Any]) -> bytes:
    """BYTES elements as one buffer: a 4-byte little-endian length before each; str becomes UTF-8."""
    parts: list[bytes] = []
    for item in items:
        data = item.encode() if isinstance(item, str) else bytes(item)
        parts += [_LENGTH.pack(len(data)), data]
    return b"".join(parts)


def decode_bytes_elements(raw: bytes, count: int) -> list[bytes]:
    """Exactly ``count`` length-prefixed BYTES elements from ``raw``, with nothing left over."""
    items: list[bytes] = []
    offset = 0
    view = memoryview(raw)
    for index in range(count):
        if offset + _LENGTH.size > len(raw):
            raise ProtocolError(f"BYTES raw data ends inside the length of element {index} (of {count})")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        if offset + length > len(raw):
            raise ProtocolError(f"BYTES element {index} claims {length} bytes; only {len(raw) - offset} remain")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(raw):
        raise ProtocolError(f"BYTES raw data has {len(raw) - offset} bytes after its {count} elements")
    return items


def first_non_finite(array: np.ndarray) -> float | None:
    """The first NaN or infinity in a float array, or None when every value is finite."""
    if array.dtype.kind != "f" or bool(np.isfinite(array).all()):
        return None
    flat = array.reshape(-1)
    return float(flat[~np.isfinite(flat)][0])


def _numeric_dtype(datatype: str) -> np.dtype[np.generic]:
    dtype = DATATYPES.get(datatype)
    if dtype is None:
        raise ProtocolError(f"datatype {datatype} is not supported; use one of {list(DATATYPES)}")
    return dtype


def _object_array(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items  # element-wise: np.array(items) would make a fixed-width bytes array
    return array.reshape(shape)


def _flatten(values: Sequence[Any]) -> list[Any]:
    """Row-major leaves of nested lists (KServe allows both flat and nested JSON data)."""
    if not isinstance(values, list | tuple):
        return list(values)  # a protobuf repeated field: already flat and typed
    if not any(isinstance(v, list) for v in values):
        return list(values)
    flat: list[Any] = []
    for value in values:
        if isinstance(value, list):
            flat += _flatten(value)
        else:
            flat.append(value)
    return flat
