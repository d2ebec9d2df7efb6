"""The REST side's bodies: KServe v2 JSON, plus the binary tensor data extension, to and from ``vflcore.wire.oip``.

A JSON tensor is ``{"name", "shape", "datatype", "data"}`` with ``data`` flat or nested in
row-major order. The binary extension (Triton's, which ``tritonclient.http`` uses by default)
puts the JSON first and raw tensors after it: the ``Inference-Header-Content-Length`` header
gives the JSON's length, and each binary tensor says its size in
``parameters.binary_data_size``, in input (or output) order. Raw bytes are laid out as on gRPC.
Everything from the body is checked for type before use; a wrong body raises ProtocolError.
"""

from __future__ import annotations

import json
from typing import Any

from vflcore.wire.oip import (
    InferRequest,
    InferResponse,
    ModelMetadata,
    ProtocolError,
    RequestedOutput,
    RequestTensor,
    ServerMetadata,
    TensorMetadata,
    array_to_raw,
)

#: The header that tells where the JSON ends and binary tensor data begins.
HEADER_LENGTH = "Inference-Header-Content-Length"


def infer_request_from_http(model: str, version: str, body: bytes, header_length: int | None) -> InferRequest:
    """An InferRequest from a POST body; ``header_length`` splits off binary tensor data."""
    if header_length is not None and not 0 <= header_length <= len(body):
        raise ProtocolError(f"{HEADER_LENGTH} is {header_length}, but the body is {len(body)} bytes")
    split = len(body) if header_length is None else header_length
    document = _object(_parse(body[:split]), "the request body")
    binary = memoryview(body)[split:]
    offset = 0
    inputs = []
    for index, item in enumerate(_list(document.get("inputs"), "inputs", required=True)):
        entry = _object(item, f"inputs[{index}]")
        name = _text(entry.get("name"), f"inputs[{index}].name")
        shape = _shape(entry.get("shape"), f"input {name!r}: shape")
        datatype = _text(entry.get("datatype"), f"input {name!r}: datatype")
        size = _object(entry.get("parameters", {}), f"input {name!r}: parameters").get("binary_data_size")
        if size is not None:
            if not _is_int(size) or size < 0 or offset + size > len(binary):
                left = len(binary) - offset
                raise ProtocolError(f"input {name!r}: binary_data_size {size!r} does not fit the {left} bytes left")
            inputs.append(RequestTensor(name, datatype, shape, raw=bytes(binary[offset : offset + size])))
            offset += size
        elif "data" in entry:
            inputs.append(RequestTensor(name, datatype, shape, values=_list(entry["data"], f"input {name!r}: data")))
        else:
            inputs.append(RequestTensor(name, datatype, shape))
    if offset != len(binary):
        raise ProtocolError(f"{len(binary) - offset} bytes of binary data after the last binary input")
    outputs = []
    for index, item in enumerate(_list(document.get("outputs", []), "outputs")):
        entry = _object(item, f"outputs[{index}]")
        name = _text(entry.get("name"), f"outputs[{index}].name")
        binary_flag = _object(entry.get("parameters", {}), f"output {name!r}: parameters").get("binary_data")
        outputs.append(RequestedOutput(name, _flag(binary_flag, f"output {name!r}: binary_data")))
    parameters = _object(document.get("parameters", {}), "parameters")
    return InferRequest(
        model=model,
        version=version,
        id=_text(document.get("id", ""), "id", empty_ok=True),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        binary_output=_flag(parameters.get("binary_data_output"), "parameters.binary_data_output") or False,
    )


def infer_response_to_http(response: InferResponse) -> tuple[bytes, int | None]:
    """The response body, and the JSON's length when binary tensor data follows it (else None)."""
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for output in response.outputs:
        entry: dict[str, Any] = {"name": output.name, "datatype": output.datatype, "shape": list(output.array.shape)}
        if output.binary:
            blob = array_to_raw(output.array, output.datatype)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif output.datatype == "BYTES":
            entry["data"] = [_utf8(item, output.name) for item in output.array.reshape(-1).tolist()]
        else:
            entry["data"] = output.array.reshape(-1).tolist()
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": response.model, "model_version": response.version, "outputs": outputs}
    if response.id:
        document["id"] = response.id
    header = dump(document)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def model_metadata_to_json(metadata: ModelMetadata) -> dict[str, Any]:
    return {
        "name": metadata.name,
        "versions": list(metadata.versions),
        "platform": metadata.platform,
        "inputs": [_tensor_metadata(spec) for spec in metadata.inputs],
        "outputs": [_tensor_metadata(spec) for spec in metadata.outputs],
    }


def server_metadata_to_json(metadata: ServerMetadata) -> dict[str, Any]:
    return {"name": metadata.name, "version": metadata.version, "extensions": list(metadata.extensions)}


def dump(document: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(document, separators=(",", ":")).encode()


def _tensor_metadata(spec: TensorMetadata) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def _parse(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:  # arrays or objects nested thousands deep: a caller's fault, not ours
        raise ProtocolError("the request body nests JSON too deeply; a KServe v2 request is a few levels") from None
    except ValueError as exc:  # an integer of more than 4300 digits (Python's int_max_str_digits)
        raise ProtocolError(f"the request body holds a number too large to read ({exc})") from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return value


def _list(value: Any, what: str, *, required: bool = False) -> list[Any]:
    if value is None and required:
        raise ProtocolError(f"{what} is missing")
    if not isinstance(value, list):
        raise ProtocolError(f"{what} must be a JSON array")
    return value


def _text(value: Any, what: str, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str) or not (value or empty_ok):
        raise ProtocolError(f"{what} must be a non-empty string" if not empty_ok else f"{what} must be a string")
    return value


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(dim) for dim in value):
        raise ProtocolError(f"{what} must be an array of integers")
    return tuple(value)


def _flag(value: Any, what: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ProtocolError(f"{what} must be true or false")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _utf8(item: Any, name: str) -> str:
    if isinstance(item, str):
        return item
    try:
        return bytes(item).decode()
    except UnicodeDecodeError:
        raise ProtocolError(
            f"output {name!r} holds bytes that are not UTF-8; ask for it as binary data (parameters.binary_data)"
        ) from None
