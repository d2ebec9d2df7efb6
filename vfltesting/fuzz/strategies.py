"""Hypothesis strategies for the fuzz campaign: messages from the proto's field types, and mutated valid ones.

``messages(cls)`` draws any message of a protobuf class, field by field, from the field's wire
type (integers over their whole range, any text, any bytes, nested messages, repeated and map
fields), so it reaches every field a hand-written case would forget. The ``*_mutants``
strategies start from a message the server would accept and break it the ways a buggy or
hostile peer does: tensor shapes, dtypes, offsets, sizes, keys, rounds and names; truncated,
repeated and dropped chunks; job documents with wrong types, unknown keys and nesting; inference
tensors whose shape, datatype and contents disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from vflcore.proto import federation_pb2 as pb
from vflcore.proto import open_inference_pb2 as oip
from vflcore.wire import names
from vflcore.wire import serde as wire
from vflcore.wire.tensors import TensorKey

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


#: Small values are where the interesting branches are; the extremes find overflows.
def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(max(low, -3), min(high, 64)), st.sampled_from([low, high]), st.integers(low, high))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_RANGES:
        return _integers(*_INT_RANGES[kind])
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return st.floats(width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64)
    if kind == FieldDescriptor.TYPE_STRING:
        return st.text(max_size=40)
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=128)
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([value.number for value in field.enum_type.values])
    raise TypeError(f"no strategy for field {field.full_name} of type {kind}")


def messages(cls: type[Message], depth: int = 3) -> st.SearchStrategy[Message]:
    """Any message of ``cls``: each field unset or drawn from its type, nested up to ``depth`` levels."""
    return _message(cls.DESCRIPTOR, depth).map(lambda values: _build(cls, values))


def _message(descriptor: Any, depth: int) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        value = _field(field, depth)
        if value is not None:
            fields[field.name] = value
    return st.fixed_dictionaries({}, optional=fields)


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any] | None:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        entry = field.message_type
        if entry.GetOptions().map_entry:
            key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
            if value.type == FieldDescriptor.TYPE_MESSAGE:
                if depth <= 0:
                    return None
                return st.dictionaries(_scalar(key), _message(value.message_type, depth - 1), max_size=3)
            return st.dictionaries(_scalar(key), _scalar(value), max_size=3)
        if depth <= 0:
            return None
        inner = _message(entry, depth - 1)
    else:
        inner = _scalar(field)
    if field.label == FieldDescriptor.LABEL_REPEATED:
        return st.lists(inner, max_size=4)
    return inner


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    _fill(message, values)
    return message


def _fill(message: Message, values: dict[str, Any]) -> None:
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, dict):
                    _fill(target[key], item)
                else:
                    target[key] = item
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.label == FieldDescriptor.LABEL_REPEATED:
                for item in value:
                    _fill(target.add(), item)
            else:
                _fill(target, value)
                target.SetInParent()
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            target.extend(value)
        else:
            setattr(message, name, value)


# ---- tensor chunk streams -------------------------------------------------------------------------

DTYPES = ["float32", "float64", "int64", "float16", "object", "bool", "<f4", "", "float32\x00"]
TENSOR_MUTATIONS = ("shape", "dtype", "offset", "total_bytes", "truncate", "extend", "repeat", "drop", "key", "nan")


@st.composite
def chunk_mutants(
    draw: st.DrawFn,
    job_ids: list[str],
    safe: Callable[[TensorKey], TensorKey],
    mutations: st.SearchStrategy[list[str]] | None = None,
) -> list[pb.TensorChunk]:
    """A stream of TensorChunks from a valid tensor, then broken in up to three ways (``mutations``).

    ``safe`` rewrites every key after the mutations (the campaign makes keys of the honest job
    ones it never waits for), so that no mutant can be an upload the job would accept.
    """
    key = _key(draw, job_ids, [names.EMBEDDING, names.HEAD, names.EVAL_EMBEDDING, "psi/points", "warmup/embedding"])
    rows, width = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    array = np.zeros((rows, width), dtype=draw(st.sampled_from([np.float32, np.float64, np.int64])))
    chunks = list(wire.tensor_to_chunks(key, array, chunk_bytes=draw(st.sampled_from([8, 24, 1 << 20]))))
    for mutation in draw(
        mutations if mutations is not None else st.lists(st.sampled_from(TENSOR_MUTATIONS), max_size=3)
    ):
        _mutate_chunks(draw, chunks, mutation)
    for chunk in chunks:
        chunk.key.CopyFrom(wire.key_to_proto(safe(wire.key_from_proto(chunk.key))))
    return chunks


def _key(draw: st.DrawFn, job_ids: list[str], tensor_names: list[str]) -> TensorKey:
    """A tensor key: one of ``job_ids`` or any text, any uint32 round and batch, a known name or any text."""
    return TensorKey(
        draw(st.sampled_from(job_ids) | st.text(max_size=12)),
        draw(_integers(0, 2**32 - 1)),
        draw(_integers(0, 2**32 - 1)),
        draw(st.sampled_from(tensor_names) | st.text(max_size=20)),
    )


def _mutate_chunks(draw: st.DrawFn, chunks: list[pb.TensorChunk], mutation: str) -> None:
    if not chunks:
        return
    index = draw(st.integers(0, len(chunks) - 1))
    chunk = chunks[index]
    if mutation == "shape":
        del chunk.shape[:]
        chunk.shape.extend(draw(st.lists(_integers(-(2**63), 2**63 - 1), max_size=4)))
    elif mutation == "dtype":
        chunk.dtype = draw(st.sampled_from(DTYPES))
    elif mutation == "offset":
        chunk.offset = draw(_integers(0, 2**64 - 1))
    elif mutation == "total_bytes":
        chunk.total_bytes = draw(st.sampled_from([0, 1, 1 << 30, (1 << 30) + 1, 2**63 - 1]) | _integers(0, 2**16))
    elif mutation == "truncate":
        chunk.data = chunk.data[: draw(st.integers(0, max(0, len(chunk.data) - 1)))]
    elif mutation == "extend":
        chunk.data = chunk.data + draw(st.binary(min_size=1, max_size=16))
    elif mutation == "repeat":
        chunks.insert(index, pb.TensorChunk.FromString(chunk.SerializeToString()))
    elif mutation == "drop":
        del chunks[index]
    elif mutation == "key":
        chunk.key.round = draw(_integers(0, 2**32 - 1))
        chunk.key.batch = draw(_integers(0, 2**32 - 1))
    elif mutation == "nan":
        chunk.data = np.full(max(1, len(chunk.data) // 4), np.nan, dtype=np.float32).tobytes()
    else:
        raise ValueError(f"no chunk mutation {mutation!r}; the mutations are {TENSOR_MUTATIONS}")


@st.composite
def request_mutants(draw: st.DrawFn, job_ids: list[str], safe: Callable[[TensorKey], TensorKey]) -> pb.TensorRequest:
    """A download request (gradients, ADMM state, PSI points) with any key, names and count."""
    key = _key(draw, job_ids, [names.GRADIENT, "admm/state", "psi/points", ""])
    return pb.TensorRequest(
        key=wire.key_to_proto(safe(key)),
        names=draw(st.lists(st.sampled_from([names.GRADIENT, "psi/points", "x"]) | st.text(max_size=8), max_size=3)),
        count=draw(st.sampled_from([0, 1, 2, (1 << 20) + 1]) | _integers(0, 2**32 - 1)),
    )


# ---- job documents ------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | _integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3),
    max_leaves=8,
)


@st.composite
def job_document_mutants(draw: st.DrawFn, valid: dict[str, dict[str, Any]]) -> str:
    """A job document (JSON, as ``Submit`` takes it) from a valid one: keys removed, retyped, added; or not JSON."""
    shape = draw(st.sampled_from(["mutated", "mutated", "mutated", "not-json", "deep", "any-json"]))
    if shape == "not-json":
        return draw(st.text(max_size=60))
    if shape == "deep":
        depth = draw(st.integers(100, 5000))
        return '{"job": ' + "[" * depth + "]" * depth + "}"
    if shape == "any-json":
        return json.dumps(draw(_JSON))
    document = json.loads(json.dumps(valid))
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from([*document, "unknown_table"]))
        entries = document.setdefault(table, {})
        if not isinstance(entries, dict):
            continue
        key = draw(st.sampled_from([*entries, "no_such_key"]) if entries else st.just("no_such_key"))
        if draw(st.booleans()) and key in entries:
            del entries[key]
        else:
            entries[key] = draw(_JSON)
    document.setdefault("job", {})
    if isinstance(document["job"], dict):
        document["job"]["job_id"] = "fuzz-" + str(document["job"].get("job_id", ""))[:40]
    return json.dumps(document)


# ---- inference ------------------------------------------------------------------------------------

OIP_DATATYPES = ["FP32", "FP64", "INT64", "INT32", "BYTES", "BOOL", "UINT8", "FP16", "", "fp32", "XX"]
#: The ways ``infer_mutants`` breaks a request; each is valid after any other, in any order.
INFER_MUTATIONS = ("shape", "datatype", "raw", "typed", "name", "extra", "outputs")


@st.composite
def infer_mutants(
    draw: st.DrawFn,
    model: str,
    input_name: str,
    width: int,
    mutations: st.SearchStrategy[list[str]] | None = None,
) -> oip.ModelInferRequest:
    """A ModelInferRequest for the served model, then broken: shape, datatype, contents and names disagree.

    ``mutations`` draws which breaks, in which order (default: up to three of ``INFER_MUTATIONS``).
    """
    rows = draw(st.integers(0, 4))
    values = np.zeros((rows, width), np.float32)
    request = oip.ModelInferRequest(model_name=draw(st.sampled_from([model, "", "nope"]) | st.text(max_size=8)))
    tensor = request.inputs.add(name=input_name, datatype="FP32", shape=[rows, width])
    request.raw_input_contents.append(values.tobytes())
    for mutation in draw(
        mutations if mutations is not None else st.lists(st.sampled_from(INFER_MUTATIONS), max_size=3)
    ):
        _mutate_infer(draw, request, tensor, mutation)
    return request


def _mutate_infer(draw: st.DrawFn, request: oip.ModelInferRequest, tensor: Any, mutation: str) -> None:
    """One break of ``request``, whatever the breaks before it left (no raw contents, no shape, ...)."""
    if mutation == "shape":
        del tensor.shape[:]
        tensor.shape.extend(draw(st.lists(_integers(-(2**63), 2**63 - 1), max_size=4)))
    elif mutation == "datatype":
        tensor.datatype = draw(st.sampled_from(OIP_DATATYPES))
    elif mutation == "raw":
        raw = draw(st.binary(max_size=64))
        if request.raw_input_contents:  # "typed" may have removed them: then the request gets some again
            request.raw_input_contents[0] = raw
        else:
            request.raw_input_contents.append(raw)
    elif mutation == "typed":
        del request.raw_input_contents[:]
        tensor.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=8)))
    elif mutation == "name":
        tensor.name = draw(st.text(max_size=8))
    elif mutation == "extra":
        request.inputs.add(name=draw(st.text(max_size=8)), datatype="FP32", shape=[1])
    elif mutation == "outputs":
        request.outputs.add(name=draw(st.sampled_from(["label", "probabilities", "x", ""])))
    else:
        raise ValueError(f"no inference mutation {mutation!r}; the mutations are {INFER_MUTATIONS}")


@st.composite
def rest_mutants(draw: st.DrawFn, model: str, input_name: str, width: int) -> tuple[str, str, bytes, dict[str, str]]:
    """(method, path, body, headers) for the REST endpoint: mutated infer bodies, binary framing, odd routes."""
    kind = draw(st.sampled_from(["json", "json", "binary", "bytes", "route"]))
    path = f"/v2/models/{model}/infer"
    if kind == "route":
        segments = draw(
            st.lists(
                st.sampled_from(["v2", "models", model, "versions", "1", "ready", "infer", "health", "..", "%00"])
                | st.text(max_size=6),
                max_size=6,
            )
        )
        return draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"])), "/" + "/".join(segments), b"", {}
    if kind == "bytes":
        return "POST", path, draw(st.binary(max_size=256)), {}
    rows = draw(st.integers(0, 3))
    entry: dict[str, Any] = {
        "name": input_name,
        "shape": [rows, width],
        "datatype": "FP32",
        "data": [0.0] * (rows * width),
    }
    for _ in range(draw(st.integers(0, 3))):
        entry[draw(st.sampled_from(["name", "shape", "datatype", "data", "parameters"]))] = draw(_JSON)
    document: dict[str, Any] = {"inputs": [entry]}
    if draw(st.booleans()):
        document[draw(st.sampled_from(["outputs", "parameters", "id", "inputs"]))] = draw(_JSON)
    body = json.dumps(document).encode()
    if kind == "json":
        return "POST", path, body, {"Content-Type": "application/json"}
    raw = draw(st.binary(max_size=64))
    entry["parameters"] = {
        "binary_data_size": draw(st.sampled_from([len(raw), 0, len(raw) + 1, -1]) | _integers(0, 2**40))
    }
    entry.pop("data", None)
    header = json.dumps(document).encode()
    length = draw(st.sampled_from([str(len(header)), "0", str(len(header) + len(raw) + 1), "-5", "abc"]))
    return "POST", path, header + raw, {"Inference-Header-Content-Length": length}
