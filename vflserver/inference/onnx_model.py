"""The standalone model as ONNX, served through onnxruntime: the active party's features in, predictions out.

APFed (and SingleVL) end with a model on the active party's own features. New runs write it as
``model.onnx`` (``vflcore.ml.onnx_export``) with this contract, which a stock NVIDIA Triton serving
the file answers just as our endpoint does (``triton_repository`` writes its config):

- one input ``features``, FP32 [batch, F];
- the outputs ``servable.prediction_specs`` names: classification ``probabilities`` FP32 [batch, C]
  and ``label`` INT64 [batch] (softmax and argmax are inside the graph); regression
  ``prediction`` FP32 [batch, 1];
- ``metadata_props`` from ``info_metadata``: the format tag and the ``ArtifactInfo`` as JSON, so a
  file tells what it is (job, task, feature names) without its run folder.

Loading runs no Python from the file (ONNX is a protobuf graph), so a model from elsewhere is
data, not code. ``load_servable`` also finds the file inside a Triton model repository, and still
reads the legacy ``model.safetensors`` (``artifact``) of runs made before ONNX.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from vflcore.errors import ArtifactError
from vflcore.ml.onnx_runtime import MODEL_FILE, onnx_session
from vflserver.inference.artifact import FEATURES, LEGACY_FILE, ArtifactInfo, ArtifactServable
from vflserver.inference.servable import Servable, TensorSpec, finite_float32, prediction_specs
from vflserver.inference.triton_repository import CONFIG_FILE

__all__ = [
    "FORMAT",
    "FORMAT_KEY",
    "INFO_KEY",
    "OnnxServable",
    "info_metadata",
    "is_standalone",
    "load_servable",
    "read_info",
]

#: The value of ``FORMAT_KEY`` in a standalone model's metadata; a new layout gets a new number.
FORMAT = "vfl-onnx/1"
FORMAT_KEY = "vfl.format"
INFO_KEY = "vfl.info"

#: onnxruntime's names for the element types the contract uses, by KServe datatype.
_ORT_TYPES = {"FP32": "tensor(float)", "INT64": "tensor(int64)"}


def _ort_errors() -> tuple[type[Exception], ...]:
    """onnxruntime's errors at session creation: none derives from a standard exception class.

    Looked up when a load fails, not at import: ``onnx_session`` imports onnxruntime at the first session.
    """
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    return (
        ort_state.Fail,
        ort_state.InvalidArgument,
        ort_state.InvalidGraph,
        ort_state.InvalidProtobuf,
        ort_state.NoSuchFile,
        ort_state.NotImplemented,
        ort_state.RuntimeException,
    )


def info_metadata(info: ArtifactInfo) -> dict[str, str]:
    """What a standalone model stores in its ONNX ``metadata_props``: the format tag and ``info`` as JSON."""
    return {FORMAT_KEY: FORMAT, INFO_KEY: json.dumps(vars(info))}


def _metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {prop.key: prop.value for prop in model.metadata_props}


def is_standalone(path: Path) -> bool:
    """Whether ``path`` is an ONNX file tagged as a standalone model (a federated party's part is not).

    Never raises: a missing or unreadable file is simply not one. A run folder holds ``model.onnx``
    for every algorithm (each party exports its part), so this tells which ones serve alone.
    """
    try:
        return _metadata(onnx.load(str(path))).get(FORMAT_KEY) == FORMAT
    except (OSError, DecodeError, ValueError):
        return False


def read_info(model: onnx.ModelProto | Path, *, where: str | Path | None = None) -> ArtifactInfo:
    """The ``ArtifactInfo`` stored in a standalone model's metadata; ArtifactError naming the file otherwise.

    ``model`` is a path or an already loaded graph; ``where`` names it in errors (default: the path).
    """
    where = where if where is not None else (model if isinstance(model, Path) else "the ONNX model")
    proto = _load_proto(model) if isinstance(model, Path) else model
    metadata = _metadata(proto)
    tag = metadata.get(FORMAT_KEY)
    if tag is None:
        raise ArtifactError(
            f"{where}: not a standalone model (no {FORMAT_KEY!r} in its ONNX metadata: a federated job's part "
            "needs the other parties to predict); serve the model.onnx an APFed job (apfed_r, apfed_c) wrote in "
            "the active party's run folder"
        )
    if tag != FORMAT:
        raise ArtifactError(f"{where}: format is {tag!r}, this server reads {FORMAT!r}; serve it with a matching vfl")
    try:
        fields: dict[str, Any] = json.loads(metadata[INFO_KEY])
        info = ArtifactInfo(**{**fields, "feature_names": tuple(fields["feature_names"])})
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(
            f"{where}: the model's {INFO_KEY!r} metadata is missing or incomplete ({exc}); export the model again"
        ) from None
    if info.task not in ("classification", "regression") or info.num_outputs < 1:
        raise ArtifactError(f"{where}: the model's metadata names task {info.task!r} with {info.num_outputs} outputs")
    return info


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(
            f"{path}: no such model file (an APFed job writes model.onnx in the active party's run folder)"
        ) from None
    except IsADirectoryError:
        raise ArtifactError(f"{path}: is a folder; pass the model.onnx file or a Triton model repository") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read the model file ({exc.strerror or exc})") from None


def _parse(data: bytes, path: Path) -> onnx.ModelProto:
    try:
        proto = onnx.load_from_string(data)
    except (DecodeError, ValueError) as exc:
        raise ArtifactError(f"{path}: not an ONNX model ({exc}); pass the model.onnx an APFed job wrote") from None
    if not proto.graph.node and not proto.graph.output:  # protobuf reads an empty file as an empty model
        raise ArtifactError(f"{path}: not an ONNX model (no graph); pass the model.onnx an APFed job wrote")
    return proto


def _load_proto(path: Path) -> onnx.ModelProto:
    return _parse(_read_bytes(path), path)


class OnnxServable:
    """A standalone ONNX model behind the inference endpoints, run by onnxruntime on one CPU thread.

    One intra-op thread answers batch-1 requests fastest, and the endpoint serves many callers at
    once anyway. The graph's inputs and outputs are checked against the contract at load, so a
    wrong file fails when it is served, not at the first request.
    """

    platform = "onnxruntime_onnx"
    #: predict only computes (no waiting on anyone), so the gRPC endpoint runs it on its event loop.
    compute_only = True

    def __init__(self, path: Path, *, name: str | None = None) -> None:
        self.path = path
        data = _read_bytes(path)
        self.info = read_info(_parse(data, path), where=path)
        self.name = name or self.info.model_name
        self.version = "1"
        self.inputs = [TensorSpec(FEATURES, "FP32", (-1, len(self.info.feature_names)))]
        self.outputs = prediction_specs(self.info.task, self.info.num_outputs)
        try:
            self.session = onnx_session(data, threads=1)
        except _ort_errors() as exc:
            raise ArtifactError(f"{path}: onnxruntime cannot load this model ({exc})") from None
        self._check_graph()
        self._output_names = [spec.name for spec in self.outputs]

    def _check_graph(self) -> None:
        """Refuse a graph whose inputs or outputs differ from what its metadata promises."""
        got_inputs = [(arg.name, arg.type, _dims(arg.shape)) for arg in self.session.get_inputs()]
        got_outputs = {arg.name: (arg.type, _dims(arg.shape)) for arg in self.session.get_outputs()}
        want_inputs = [(spec.name, _ORT_TYPES[spec.datatype], spec.shape) for spec in self.inputs]
        problems = []
        if got_inputs != want_inputs:
            problems.append(f"inputs {got_inputs}, expected {want_inputs}")
        want_outputs = {spec.name: (_ORT_TYPES[spec.datatype], spec.shape) for spec in self.outputs}
        if got_outputs != want_outputs:
            problems.append(f"outputs {got_outputs}, expected {want_outputs}")
        if problems:
            raise ArtifactError(
                f"{self.path}: the graph does not match its metadata ({self.info.task}, "
                f"{len(self.info.feature_names)} features, {self.info.num_outputs} outputs): {'; '.join(problems)}; "
                "export the model again"
            )

    def ready(self) -> bool:
        return True

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        features = finite_float32(inputs, FEATURES)
        results = self.session.run(self._output_names, {FEATURES: features})
        return dict(zip(self._output_names, results, strict=True))


def _dims(shape: list[int | str | None]) -> tuple[int, ...]:
    """onnxruntime's shape with -1 for every free dimension (named, like ``batch``, or unknown)."""
    return tuple(dim if isinstance(dim, int) else -1 for dim in shape)


def load_servable(path: Path, *, name: str | None = None) -> Servable:
    """A servable for whichever form the standalone model takes at ``path``.

    - a ``.onnx`` file;
    - a Triton model repository (``triton_repository``): its root holding exactly one model
      folder, a model folder ``<name>/`` (``config.pbtxt`` and ``<version>/model.onnx``; the
      highest version is served, as Triton does), or a version folder. The model is named after
      its folder, as Triton names it, unless ``name`` is given;
    - a folder holding ``model.onnx`` (the active party's run folder);
    - a legacy ``model.safetensors`` of a run made before ONNX (``ArtifactServable``).

    Anything else raises ArtifactError naming ``path`` and what to pass instead.
    """
    if path.is_dir():
        model, folder_name = _from_repository(path)
        return OnnxServable(model, name=name or folder_name)
    if path.suffix == ".safetensors":
        return ArtifactServable(path, name=name)
    if not path.exists():
        raise ArtifactError(
            f"{path}: no such file or folder; pass a {MODEL_FILE}, a Triton model repository, or a legacy {LEGACY_FILE}"
        )
    return OnnxServable(path, name=name)


def _from_repository(path: Path) -> tuple[Path, str | None]:
    """The model file and model name in a Triton repository root, model folder or version folder."""
    if (path / MODEL_FILE).is_file() and (path.parent / CONFIG_FILE).is_file() and path.name.isdigit():
        return path / MODEL_FILE, path.parent.name  # a version folder
    if (path / CONFIG_FILE).is_file():
        return _latest_version(path), path.name
    models = sorted(child for child in path.iterdir() if (child / CONFIG_FILE).is_file())
    if len(models) == 1:
        return _latest_version(models[0]), models[0].name
    if models:
        names = ", ".join(model.name for model in models)
        raise ArtifactError(
            f"{path}: this model repository holds {len(models)} models ({names}); pass the model's folder, "
            f"e.g. {models[0]}"
        )
    if (path / MODEL_FILE).is_file():
        return path / MODEL_FILE, None  # a run folder: the file, named by its metadata
    raise ArtifactError(
        f"{path}: neither a Triton model repository (<name>/{CONFIG_FILE} and <name>/1/{MODEL_FILE}) nor a "
        f"folder holding {MODEL_FILE}; pass the model file or the repository"
    )


def _latest_version(folder: Path) -> Path:
    versions = sorted(
        (int(child.name) for child in folder.iterdir() if child.name.isdigit() and (child / MODEL_FILE).is_file()),
    )
    if not versions:
        raise ArtifactError(f"{folder}: a Triton model folder with no <version>/{MODEL_FILE} in it")
    return folder / str(versions[-1]) / MODEL_FILE
