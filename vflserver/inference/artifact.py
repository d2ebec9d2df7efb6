"""The legacy standalone model artifact: one safetensors file the active party can serve with nobody else.

New runs write the standalone model as ONNX (``model.onnx``, served by ``onnx_model.OnnxServable``);
this module stays so that the ``model.safetensors`` of runs made before can still be served
(``onnx_model.load_servable`` picks it by its suffix), and it keeps ``ArtifactInfo``, which the
ONNX file's metadata stores too.

APFed (and SingleVL) end with a model on the active party's own features, g_T(f_A(x^A)). The
artifact holds its weights as safetensors tensors and everything needed to rebuild and serve it
(layer list, input feature names, task, output width, job) as JSON in the file's metadata. Loading
it parses a JSON header and raw little-endian arrays: there is no pickle anywhere, so an artifact
from elsewhere cannot run code. The layer vocabulary is deliberately small (Linear and common
activations, nested Sequential flattened); anything else is refused at export with the layer named.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vflcore.errors import ArtifactError
from vflserver.inference.servable import (
    LABEL,
    PREDICTION,
    PROBABILITIES,
    TensorSpec,
    finite_float32,
    prediction_outputs,
    prediction_specs,
)

if TYPE_CHECKING:  # imported where a legacy artifact is written or read: serving and scoring
    # import this module for its names and ``ArtifactInfo``, and most never meet such a file
    # (torch costs a process about 1.1 s of CPU to import: each Ray worker of a scoring job paid it)
    import torch
    from torch import nn

__all__ = [
    "FEATURES",
    "LABEL",
    "LEGACY_FILE",
    "PREDICTION",
    "PROBABILITIES",
    "ArtifactInfo",
    "ArtifactServable",
    "load_artifact",
    "save_artifact",
]

FORMAT = "vfl-model/1"
#: The file name of the legacy artifact in the active party's run folder (runs before ONNX).
LEGACY_FILE = "model.safetensors"
FEATURES = "features"


def _activations() -> dict[str, type[nn.Module]]:
    from torch import nn

    return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}


@dataclass(frozen=True)
class ArtifactInfo:
    """What a served model needs to know besides its weights."""

    model_name: str
    job_id: str
    algorithm: str
    task: str  # "classification" or "regression"
    feature_names: tuple[str, ...]
    num_outputs: int


def _flatten(module: nn.Module) -> list[nn.Module]:
    from torch import nn

    if isinstance(module, nn.Sequential):
        return [leaf for child in module for leaf in _flatten(child)]
    return [module]


def _describe(layers: Sequence[nn.Module]) -> list[dict[str, Any]]:
    from torch import nn

    activations = _activations()
    described: list[dict[str, Any]] = []
    for index, layer in enumerate(layers):
        if isinstance(layer, nn.Linear):
            described.append({"type": "linear", "in": layer.in_features, "out": layer.out_features})
        elif isinstance(layer, nn.Dropout | nn.Identity):
            continue  # nothing to do at inference time
        else:
            name = next((n for n, cls in activations.items() if type(layer) is cls), None)
            if name is None:
                raise ArtifactError(
                    f"layer {index} ({type(layer).__name__}) cannot go into a standalone artifact; "
                    f"supported: Linear, Dropout, Identity and {', '.join(sorted(activations))}"
                )
            described.append({"type": name})
    return described


def save_artifact(path: Path, model: nn.Module, info: ArtifactInfo) -> Path:
    """Write ``model`` (a stack of supported layers) with ``info``; atomic, readable by others (no secret).

    Legacy: new runs export ONNX (``vflcore.ml.onnx_export``). Kept for the tests of old runs'
    artifacts, and for whoever must write a file an older ``vfl-serve`` reads.
    """
    import torch
    from safetensors.torch import save_file
    from torch import nn

    layers = _flatten(model)
    spec = _describe(layers)
    linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
    if not linears or linears[0].in_features != len(info.feature_names):
        raise ArtifactError(f"{path}: the model's input width does not match {len(info.feature_names)} feature names")
    tensors: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(linears):
        tensors[f"layer{i}.weight"] = layer.weight.detach().to(torch.float32).contiguous().clone()
        tensors[f"layer{i}.bias"] = layer.bias.detach().to(torch.float32).contiguous().clone()
    metadata = {"format": FORMAT, "layers": json.dumps(spec), "info": json.dumps(vars(info))}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_artifact(path: Path) -> tuple[nn.Module, ArtifactInfo]:
    """Rebuild the model and its info from ``path``; refuses anything that is not a vfl-model/1 file."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such model artifact (train with apfed_r or apfed_c first)") from None
    except (SafetensorError, OSError) as exc:
        raise ArtifactError(f"{path}: not a readable safetensors model artifact ({exc})") from None
    if metadata.get("format") != FORMAT:
        raise ArtifactError(f"{path}: format is {metadata.get('format')!r}, this server reads {FORMAT!r}")
    try:
        fields = json.loads(metadata["info"])
        info = ArtifactInfo(**{**fields, "feature_names": tuple(fields["feature_names"])})
        spec = json.loads(metadata["layers"])
        model = _build(spec, tensors)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{path}: the artifact's metadata or weights are inconsistent ({exc})") from None
    model.eval()
    return model, info


def _build(spec: Sequence[Mapping[str, Any]], tensors: Mapping[str, torch.Tensor]) -> nn.Module:
    import torch
    from torch import nn

    activations = _activations()
    layers: list[nn.Module] = []
    linear = 0
    for entry in spec:
        if entry["type"] == "linear":
            # skip_init: the weights come from the file, and drawing throwaway ones from torch's
            # global RNG would disturb a seeded build on another thread (``build_seeded``).
            layer = torch.nn.utils.skip_init(nn.Linear, int(entry["in"]), int(entry["out"]))  # type: ignore[no-untyped-call]
            layer.load_state_dict({"weight": tensors[f"layer{linear}.weight"], "bias": tensors[f"layer{linear}.bias"]})
            layers.append(layer)
            linear += 1
        else:
            layers.append(activations[entry["type"]]())
    if linear != len(tensors) // 2:
        raise ValueError(f"{len(tensors)} tensors for {linear} linear layers")
    return nn.Sequential(*layers)


class ArtifactServable:
    """A legacy standalone artifact behind the inference endpoints: the active party's features in, predictions out."""

    platform = "pytorch"
    #: predict only computes (no waiting on anyone), so the gRPC endpoint runs it on its event loop.
    compute_only = True

    def __init__(self, path: Path, *, name: str | None = None) -> None:
        self.path = path
        self.model, self.info = load_artifact(path)
        self.name = name or self.info.model_name
        self.version = "1"
        self.inputs = [TensorSpec(FEATURES, "FP32", (-1, len(self.info.feature_names)))]
        self.outputs = prediction_specs(self.info.task, self.info.num_outputs)

    def ready(self) -> bool:
        return True

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        features = finite_float32(inputs, FEATURES)
        with torch.inference_mode():
            output = self.model(torch.from_numpy(features)).numpy()
        return prediction_outputs(self.info.task, output)
