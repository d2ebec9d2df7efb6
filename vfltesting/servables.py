"""Real torch models behind the ``Servable`` contract, for the inference endpoint's tests.

``DigitsClassifier`` is a seeded MLP over digits-sized features (image rows 0-2 are 24 pixels):
it returns class probabilities and the predicted label, like a trained classifier would, and its
``reference`` method runs the same network in-process so tests can compare what came over the
wire with what the model computes. Switches make it fail the ways a federated model can.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import tritonclient.grpc as triton_grpc

from vflcore.ml.models import build_seeded, mlp
from vflcore.security.tls import TlsFiles
from vflserver.inference.servable import PartyUnavailable, TensorSpec


class DigitsClassifier:
    """Named float inputs (concatenated in order) → ``probabilities`` FP32 [-1, 10], ``label`` INT64 [-1]."""

    platform = "pytorch"

    def __init__(
        self,
        name: str = "digits",
        widths: Mapping[str, int] | None = None,
        *,
        seed: int = 0,
        version: str = "1",
        compute_only: bool = True,
    ) -> None:
        self._name, self._version = name, version
        self.widths = dict(widths or {"features": 24})
        width = sum(self.widths.values())
        self.network = build_seeded(lambda: mlp(width, (32,), 10), seed).eval()
        self.is_ready = True
        self.compute_only = compute_only  # False: the gRPC endpoint calls predict in its thread pool
        self.offline_party: int | None = None  # set to make predict fail like federated inference

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return self._version

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(name, "FP32", (-1, width)) for name, width in self.widths.items()]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [TensorSpec("probabilities", "FP32", (-1, 10)), TensorSpec("label", "INT64", (-1,))]

    def ready(self) -> bool:
        return self.is_ready

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.offline_party is not None:
            raise PartyUnavailable(f"party {self.offline_party} is not connected")
        return self.reference(*(inputs[name] for name in self.widths))

    def reference(self, *arrays: np.ndarray) -> dict[str, np.ndarray]:
        """The network run in this process, without the endpoint."""
        with torch.inference_mode():
            features = torch.from_numpy(np.concatenate(arrays, axis=1))
            probabilities = torch.softmax(self.network(features), dim=1)
        return {"probabilities": probabilities.numpy(), "label": probabilities.argmax(dim=1).numpy()}


def digits_rows(rows: int, width: int = 24, seed: int = 0) -> np.ndarray:
    """Pixel intensities in [0, 16], as in scikit-learn's digits, as float32."""
    return np.random.default_rng(seed).integers(0, 17, size=(rows, width)).astype(np.float32)


def triton_grpc_client(port: int, files: TlsFiles) -> triton_grpc.InferenceServerClient:
    """Triton's stock gRPC client on 127.0.0.1:``port``, trusting ``files.ca`` and presenting ``files``' certificate."""
    return triton_grpc.InferenceServerClient(
        f"127.0.0.1:{port}",
        ssl=True,
        root_certificates=str(files.ca),
        private_key=str(files.key),
        certificate_chain=str(files.cert),
    )
