"""The contract between a model and the inference endpoints (KServe v2 / Open Inference Protocol).

An endpoint knows nothing about torch or the federation: it validates a request against a
``Servable``'s declared inputs, calls ``predict`` and encodes the outputs. Errors that are the
caller's fault raise ``InferenceInputError`` (gRPC INVALID_ARGUMENT, HTTP 400); a passive party
that federated inference needs but cannot reach raises ``PartyUnavailable`` (gRPC UNAVAILABLE,
HTTP 503). Anything else is a server fault (INTERNAL, HTTP 500).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: KServe v2 datatype names and the numpy dtypes they travel as (little-endian on the wire).
DATATYPES: dict[str, np.dtype[np.generic]] = {
    "BOOL": np.dtype(np.bool_),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(np.object_),
}


class InferenceInputError(ValueError):
    """The request is wrong (name, shape, datatype, values); the message names the field."""


class PartyUnavailable(RuntimeError):
    """Federated inference needs a passive party that is not connected."""


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output: KServe datatype and shape, -1 for a free dimension (the batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def check(self, array: np.ndarray) -> None:
        """Raise InferenceInputError unless ``array`` fits this spec."""
        if array.ndim != len(self.shape):
            raise InferenceInputError(
                f"input {self.name!r}: expected {len(self.shape)} dimensions {list(self.shape)}, got shape "
                f"{list(array.shape)}"
            )
        for axis, (want, got) in enumerate(zip(self.shape, array.shape, strict=True)):
            if want != -1 and want != got:
                raise InferenceInputError(
                    f"input {self.name!r}: dimension {axis} must be {want} (shape {list(self.shape)}), got {got}"
                )


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
