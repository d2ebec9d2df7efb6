"""Answer Open Inference Protocol calls on plain types, for both endpoints (gRPC and REST).

The endpoints only translate between their wire format and ``vflcore.wire.oip``'s dataclasses; this
module does the work they share: look the model up, check every input against the model's specs
before decoding a byte (name, datatype, shape, data size), refuse non-finite floats and batch
sizes that disagree, call ``predict`` and pick the requested outputs. ``failure`` gives any
exception its gRPC status from the one table (``vflcore.status``); the REST endpoint turns that
into an HTTP status with ``vflcore.status.http_status``.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version

import grpc
import numpy as np
import structlog

from vflcore.errors import InferenceInputError, ProtocolError
from vflcore.status import status_for
from vflcore.wire.oip import (
    DATATYPES,
    FLOAT_DATATYPES,
    InferRequest,
    InferResponse,
    ModelMetadata,
    OutputTensor,
    RequestTensor,
    ServerMetadata,
    array_from_raw,
    array_from_values,
    first_non_finite,
)
from vflserver.inference.model_state import needs_parties
from vflserver.inference.registry import ModelRegistry, ServedModel
from vflserver.inference.servable import TensorSpec, computes_inline

log = structlog.get_logger(__name__)

SERVER_NAME = "vfl-service"

#: The REST binary tensor data extension (Triton's name for it), which tritonclient.http uses.
EXTENSIONS = ("binary_tensor_data",)


def failure(exc: Exception, *, call: str) -> tuple[grpc.StatusCode, str]:
    """The status for ``exc`` (``vflcore.status``, the one table) with a message for the caller.

    A server fault (no status in the table) is INTERNAL, logged here; its message names only the
    exception's type, so no path or value from inside the server reaches the caller.
    """
    code = status_for(exc)
    if code is not None:
        return code, str(exc)
    log.error("inference_internal_error", call=call, error=repr(exc), exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); the server log has the details"


class InferenceHandler:
    """The six calls of the protocol over a model registry."""

    def __init__(self, registry: ModelRegistry, server_version: str | None = None) -> None:
        self.registry = registry
        self.metadata = ServerMetadata(SERVER_NAME, server_version or _package_version(), EXTENSIONS)

    def live(self) -> bool:
        """The process answers, so it is live."""
        return True

    def ready(self) -> bool:
        """At least one served model is ready, and every standalone model is (docs/reference/inference.md, ServerReady).

        An endpoint with no model yet (training still running) is not ready: a load balancer
        should not send it inference traffic. A federated model that waits for a passive party
        does not make the whole server not ready while another model answers: its callers get
        503 naming the party, and ModelReady reports it. A standalone model that is not ready
        does, since nothing outside this server can bring it back.
        """
        models = [entry.servable for entry in self.registry.models()]
        standalone = [servable for servable in models if not needs_parties(servable)]
        return any(servable.ready() for servable in models) and all(servable.ready() for servable in standalone)

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.registry.get(name, version).servable.ready()

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        servable = self.registry.get(name, version).servable
        return ModelMetadata(
            name=servable.name,
            versions=(servable.version,),
            platform=servable.platform,
            inputs=tuple(spec.metadata() for spec in servable.inputs),
            outputs=tuple(spec.metadata() for spec in servable.outputs),
        )

    def computes_inline(self, name: str, version: str = "") -> bool:
        """Whether model ``name`` only computes (``servable.computes_inline``), so an event loop may run it.

        An unknown model counts as inline: ``infer`` refuses it at once, with nothing to wait for.
        """
        try:
            return computes_inline(self.registry.get(name, version).servable)
        except LookupError:
            return True

    def infer(self, request: InferRequest) -> InferResponse:
        """Check, decode, predict, and return the requested outputs in the requested order.

        ``ready()`` is not consulted: ``predict`` raises PartyUnavailable naming the missing party,
        or answers anyway in a degraded mode.
        """
        model = self.registry.get(request.model, request.version)
        servable = model.servable
        arrays = decode_inputs(model, request.inputs)
        wanted = _requested(model, request)
        results = servable.predict(arrays)
        return InferResponse(
            model=servable.name,
            version=servable.version,
            id=request.id,
            outputs=tuple(
                OutputTensor(spec.name, spec.datatype, _output(results, spec, servable.name), binary)
                for spec, binary in wanted
            ),
        )


def decode_inputs(model: ServedModel, tensors: tuple[RequestTensor, ...]) -> dict[str, np.ndarray]:
    """Every declared input as an array, or InferenceInputError naming the first bad input."""
    arrays: dict[str, np.ndarray] = {}
    for tensor in tensors:
        spec = model.inputs.get(tensor.name)
        if spec is None:
            raise InferenceInputError(f"unknown input {tensor.name!r}; model takes {sorted(model.inputs)}")
        if tensor.name in arrays:
            raise InferenceInputError(f"input {tensor.name!r} is given twice")
        arrays[tensor.name] = _decode(tensor, spec)
    missing = [name for name in model.inputs if name not in arrays]
    if missing:
        raise InferenceInputError(f"missing input {missing[0]!r}; model takes {sorted(model.inputs)}")
    _check_batch(model, arrays)
    return arrays


def _decode(tensor: RequestTensor, spec: TensorSpec) -> np.ndarray:
    if tensor.datatype != spec.datatype:
        raise InferenceInputError(
            f"input {tensor.name!r}: datatype {tensor.datatype or '(none)'} does not match the model's {spec.datatype}"
        )
    spec.check_shape(tensor.shape)
    try:
        if tensor.raw is not None:
            array = array_from_raw(tensor.raw, tensor.datatype, tensor.shape)
        elif tensor.values is not None:
            array = array_from_values(tensor.values, tensor.datatype, tensor.shape)
        else:
            raise ProtocolError("has no data (neither raw contents nor values)")
    except ProtocolError as exc:
        raise InferenceInputError(f"input {tensor.name!r}: {exc}") from None
    if tensor.datatype in FLOAT_DATATYPES:
        bad = first_non_finite(array)
        if bad is not None:
            raise InferenceInputError(f"input {tensor.name!r}: values must be finite, found {bad}")
    return array


def _check_batch(model: ServedModel, arrays: Mapping[str, np.ndarray]) -> None:
    """Inputs whose first dimension is free (the batch) must agree on its size."""
    batch: tuple[str, int] | None = None
    for name, spec in model.inputs.items():
        if not spec.shape or spec.shape[0] != -1:
            continue
        rows = arrays[name].shape[0]
        if batch is None:
            batch = (name, rows)
        elif rows != batch[1]:
            raise InferenceInputError(
                f"input {name!r} has {rows} rows but input {batch[0]!r} has {batch[1]}; the batch sizes must agree"
            )


def _requested(model: ServedModel, request: InferRequest) -> list[tuple[TensorSpec, bool]]:
    """(spec, send as binary) for each output to return: the requested ones, or all in declared order."""
    if not request.outputs:
        return [(spec, request.binary_output) for spec in model.outputs.values()]
    wanted = []
    for output in request.outputs:
        spec = model.outputs.get(output.name)
        if spec is None:
            raise InferenceInputError(f"unknown output {output.name!r}; model returns {sorted(model.outputs)}")
        wanted.append((spec, request.binary_output if output.binary is None else output.binary))
    return wanted


def _output(results: Mapping[str, np.ndarray], spec: TensorSpec, model: str) -> np.ndarray:
    array = results.get(spec.name)
    if array is None:
        raise RuntimeError(f"model {model!r} returned no output {spec.name!r} (it returned {sorted(results)})")
    dtype = DATATYPES[spec.datatype]
    return array if array.dtype == dtype else np.asarray(array).astype(dtype)


def _package_version() -> str:
    try:
        return version("vfl-service")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0"
