"""The contract between a model and the inference endpoints (KServe v2 / Open Inference Protocol).

An endpoint knows nothing about torch or the federation: it validates a request against a
``Servable``'s declared inputs, calls ``predict`` and encodes the outputs. Errors that are the
caller's fault raise ``InferenceInputError`` (gRPC INVALID_ARGUMENT, HTTP 400); a passive party
that federated inference needs but cannot reach raises ``PartyUnavailable`` (gRPC UNAVAILABLE,
HTTP 503). Anything else is a server fault (INTERNAL, HTTP 500).

The endpoints add one of their own: ``ModelNotFound`` (NOT_FOUND, HTTP 404) for a name or
version the registry does not hold. They call ``predict`` even when ``ready()`` is false: the
servable knows best why it cannot answer (which party is missing), and a degraded mode may
answer anyway. The three error classes live in ``vflcore.errors`` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from vflcore.errors import InferenceInputError, ModelNotFound, PartyUnavailable
from vflcore.wire.oip import DATATYPES, TensorMetadata

__all__ = [
    "DATATYPES",
    "InferenceInputError",
    "ModelNotFound",
    "PartyUnavailable",
    "Servable",
    "TensorSpec",
    "computes_inline",
]


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output: KServe datatype and shape, -1 for a free dimension (the batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def check(self, array: np.ndarray) -> None:
        """Raise InferenceInputError unless ``array`` fits this spec."""
        self.check_shape(array.shape)

    def check_shape(self, shape: tuple[int, ...]) -> None:
        """Raise InferenceInputError unless a tensor of ``shape`` fits this spec (before any decoding)."""
        if len(shape) != len(self.shape):
            raise InferenceInputError(
                f"input {self.name!r}: expected {len(self.shape)} dimensions {list(self.shape)}, got shape "
                f"{list(shape)}"
            )
        for axis, (want, got) in enumerate(zip(self.shape, shape, strict=True)):
            if want != -1 and want != got:
                raise InferenceInputError(
                    f"input {self.name!r}: dimension {axis} must be {want} (shape {list(self.shape)}), got {got}"
                )
            if got < 0:
                raise InferenceInputError(f"input {self.name!r}: dimension {axis} is negative ({got})")

    def metadata(self) -> TensorMetadata:
        """This spec as the protocol's tensor metadata."""
        return TensorMetadata(self.name, self.datatype, self.shape)


class Servable(Protocol):
    """A model the endpoints can serve."""

    @property
    def name(self) -> str:
        """The model name in URLs and requests (``/v2/models/{name}``)."""
        ...

    @property
    def version(self) -> str:
        """The model version reported in metadata."""
        ...

    @property
    def platform(self) -> str:
        """What runs the model, for ModelMetadata (e.g. ``pytorch_torchscript`` style names)."""
        ...

    @property
    def inputs(self) -> list[TensorSpec]:
        """What ModelInfer takes."""
        ...

    @property
    def outputs(self) -> list[TensorSpec]:
        """What ModelInfer returns."""
        ...

    def ready(self) -> bool:
        """Whether ``predict`` can answer now (federated models: every party connected)."""
        ...

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name for validated inputs (every declared input present, shapes checked)."""
        ...


def computes_inline(servable: Servable) -> bool:
    """Whether ``predict`` only computes in this process: no network, no waiting on anyone.

    A servable says so with a class attribute ``compute_only = True`` (optional, not a protocol
    member; a standalone artifact qualifies, federated inference does not). The gRPC endpoint
    then calls ``predict`` on its event loop and saves a thread hand-off per request; any other
    servable runs in a thread pool, so a slow or waiting ``predict`` cannot stall other calls.
    """
    return getattr(servable, "compute_only", False) is True


def finite_float32(inputs: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """Input ``name`` as a contiguous float32 array; InferenceInputError if it holds NaN or infinity."""
    values = np.ascontiguousarray(inputs[name], dtype=np.float32)
    if not np.isfinite(values).all():
        raise InferenceInputError(f"input {name!r}: values must be finite (no NaN or infinity)")
    return values


#: The outputs every trained model answers with: class probabilities and the class, or a value.
PROBABILITIES, LABEL, PREDICTION = "probabilities", "label", "prediction"


def prediction_specs(task: str, outputs: int) -> list[TensorSpec]:
    """What a model of ``task`` returns: probabilities (FP32) and label (INT64), or prediction (FP32)."""
    if task == "classification":
        return [TensorSpec(PROBABILITIES, "FP32", (-1, outputs)), TensorSpec(LABEL, "INT64", (-1,))]
    return [TensorSpec(PREDICTION, "FP32", (-1, 1))]


def prediction_outputs(task: str, output: np.ndarray) -> dict[str, np.ndarray]:
    """The model's raw output (logits, or values for regression) as the outputs ``prediction_specs`` names."""
    if task != "classification":
        return {PREDICTION: output.astype(np.float32, copy=False)}
    shifted = np.exp(output - output.max(axis=1, keepdims=True))
    return {
        PROBABILITIES: (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32),
        LABEL: output.argmax(axis=1).astype(np.int64),
    }
