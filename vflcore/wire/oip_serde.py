"""The one boundary between Open Inference Protocol protobuf messages and ``vflcore.wire.oip``'s types.

Paired ``*_to_proto`` / ``*_from_proto`` functions: the SDK uses the request ``to`` and response
``from`` halves, the server the other two, and the round-trip tests hold them together. Tensors
go out as ``raw_*_contents``, the form stock clients send and expect; typed ``contents`` are
accepted too, because the protocol allows either.
"""

from __future__ import annotations

from vflcore.proto import open_inference_pb2 as pb
from vflcore.wire.oip import (
    InferRequest,
    InferResponse,
    ModelMetadata,
    OutputTensor,
    ProtocolError,
    RequestedOutput,
    RequestTensor,
    ServerMetadata,
    TensorMetadata,
    array_from_raw,
    array_from_values,
    array_to_raw,
)

# Which InferTensorContents field carries which datatype's typed values.
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def infer_request_to_proto(request: InferRequest) -> pb.ModelInferRequest:
    """A ModelInferRequest with every input's data in ``raw_input_contents``."""
    msg = pb.ModelInferRequest(model_name=request.model, model_version=request.version, id=request.id)
    for tensor in request.inputs:
        if tensor.raw is None:
            raise ProtocolError(f"input {tensor.name!r}: the SDK sends raw data only")
        msg.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        msg.raw_input_contents.append(tensor.raw)
    for output in request.outputs:
        msg.outputs.add(name=output.name)
    return msg


def infer_request_from_proto(msg: pb.ModelInferRequest) -> InferRequest:
    """An InferRequest whose tensors hold raw bytes or typed values, not yet checked against a model."""
    raw = msg.raw_input_contents
    if raw and len(raw) != len(msg.inputs):
        raise ProtocolError(
            f"raw_input_contents has {len(raw)} entries for {len(msg.inputs)} inputs; send one per input, in order"
        )
    inputs = []
    for index, tensor in enumerate(msg.inputs):
        shape = tuple(tensor.shape)
        if raw:
            if tensor.HasField("contents"):
                raise ProtocolError(f"input {tensor.name!r}: both raw_input_contents and contents are set")
            inputs.append(RequestTensor(tensor.name, tensor.datatype, shape, raw=raw[index]))
        elif tensor.HasField("contents"):
            field = _CONTENTS_FIELD.get(tensor.datatype)
            values = getattr(tensor.contents, field) if field else None
            inputs.append(RequestTensor(tensor.name, tensor.datatype, shape, values=values))
        else:
            inputs.append(RequestTensor(tensor.name, tensor.datatype, shape))
    return InferRequest(
        model=msg.model_name,
        version=msg.model_version,
        id=msg.id,
        inputs=tuple(inputs),
        outputs=tuple(RequestedOutput(output.name) for output in msg.outputs),
    )


def infer_response_to_proto(response: InferResponse) -> pb.ModelInferResponse:
    """A ModelInferResponse with every output's data in ``raw_output_contents``."""
    msg = pb.ModelInferResponse(model_name=response.model, model_version=response.version, id=response.id)
    for output in response.outputs:
        msg.outputs.add(name=output.name, datatype=output.datatype, shape=output.array.shape)
        msg.raw_output_contents.append(array_to_raw(output.array, output.datatype))
    return msg


def infer_response_from_proto(msg: pb.ModelInferResponse) -> InferResponse:
    """An InferResponse with decoded arrays, from raw or typed contents; a size mismatch raises."""
    raw = msg.raw_output_contents
    if raw and len(raw) != len(msg.outputs):
        raise ProtocolError(f"raw_output_contents has {len(raw)} entries for {len(msg.outputs)} outputs")
    outputs = []
    for index, tensor in enumerate(msg.outputs):
        shape = tuple(tensor.shape)
        try:
            if raw:
                array = array_from_raw(raw[index], tensor.datatype, shape)
            else:
                field = _CONTENTS_FIELD.get(tensor.datatype)
                if field is None:
                    raise ProtocolError(f"datatype {tensor.datatype} is not supported")
                array = array_from_values(getattr(tensor.contents, field), tensor.datatype, shape)
        except ProtocolError as exc:
            raise ProtocolError(f"output {tensor.name!r}: {exc}") from None
        outputs.append(OutputTensor(tensor.name, tensor.datatype, array))
    return InferResponse(msg.model_name, msg.model_version, msg.id, tuple(outputs))


def model_metadata_to_proto(metadata: ModelMetadata) -> pb.ModelMetadataResponse:
    msg = pb.ModelMetadataResponse(name=metadata.name, versions=metadata.versions, platform=metadata.platform)
    for spec in metadata.inputs:
        msg.inputs.add(name=spec.name, datatype=spec.datatype, shape=spec.shape)
    for spec in metadata.outputs:
        msg.outputs.add(name=spec.name, datatype=spec.datatype, shape=spec.shape)
    return msg


def model_metadata_from_proto(msg: pb.ModelMetadataResponse) -> ModelMetadata:
    return ModelMetadata(
        name=msg.name,
        versions=tuple(msg.versions),
        platform=msg.platform,
        inputs=tuple(TensorMetadata(t.name, t.datatype, tuple(t.shape)) for t in msg.inputs),
        outputs=tuple(TensorMetadata(t.name, t.datatype, tuple(t.shape)) for t in msg.outputs),
    )


def server_metadata_to_proto(metadata: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(name=metadata.name, version=metadata.version, extensions=metadata.extensions)


def server_metadata_from_proto(msg: pb.ServerMetadataResponse) -> ServerMetadata:
    return ServerMetadata(name=msg.name, version=msg.version, extensions=tuple(msg.extensions))
