"""Lay out an ONNX model as a Triton model repository, so a stock NVIDIA Triton serves it unchanged.

    <root>/<name>/config.pbtxt
    <root>/<name>/1/model.onnx

``tritonserver --model-repository <root>`` then serves ``<name>`` over the same KServe v2
protocol as our endpoint, with the same inputs and outputs. ``onnx_model.load_servable`` reads
the same layout, so one folder is what both servers are pointed at.

The config is derived from the ONNX graph itself (names, element types, shapes), never from
what the caller believes the model is, so it cannot disagree with the file. Its choices:

- ``platform: "onnxruntime_onnx"``: Triton's ONNX Runtime backend, whose default model file name
  is ``model.onnx``.
- ``max_batch_size: 0`` and each tensor's full shape in ``dims``, the batch dimension as ``-1``
  (``features`` [-1, F], ``probabilities`` [-1, C], ``label`` [-1], ``prediction`` [-1, 1]).
  Triton's model-configuration guide gives a batching model (``max_batch_size`` > 0) the shape
  [-1] + dims and requires non-empty dims, so the 1-D ``label`` would have to be declared as
  dims [1] with ``reshape: { shape: [ ] }`` and would come back as [batch, 1], not [batch] as
  our endpoint answers; and every request larger than ``max_batch_size`` would be refused. With
  0, Triton passes the request's shape through as our endpoint does, for any batch size. What is
  given up is Triton's dynamic batcher (it needs ``max_batch_size`` >= 1): worth little for a
  model this small, whose callers can send a batch themselves.
- No ``instance_group``: Triton's default (the GPUs if it has any, else the CPU) fits either.

Because the config lists inputs and outputs, Triton's ONNX Runtime backend skips its
auto-completion (which would otherwise turn on batching) and only checks the config against the
graph, where ``-1`` matches the graph's named ``batch`` dimension.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from vflcore.errors import ArtifactError
from vflcore.ml.onnx_runtime import MODEL_FILE

__all__ = ["CONFIG_FILE", "PLATFORM", "VERSION", "check_model_name", "triton_config", "write_triton_repository"]

CONFIG_FILE = "config.pbtxt"
PLATFORM = "onnxruntime_onnx"
#: The one version folder written; Triton serves the highest version by default.
VERSION = "1"
#: A model name is a folder name and a URL path segment (``/v2/models/<name>``): kept to safe characters.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")

#: Triton's data type for each ONNX element type (the model-configuration guide's table).
_TRITON_TYPES: dict[int, str] = {
    onnx.TensorProto.BOOL: "TYPE_BOOL",
    onnx.TensorProto.UINT8: "TYPE_UINT8",
    onnx.TensorProto.UINT16: "TYPE_UINT16",
    onnx.TensorProto.UINT32: "TYPE_UINT32",
    onnx.TensorProto.UINT64: "TYPE_UINT64",
    onnx.TensorProto.INT8: "TYPE_INT8",
    onnx.TensorProto.INT16: "TYPE_INT16",
    onnx.TensorProto.INT32: "TYPE_INT32",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.STRING: "TYPE_STRING",
}


def check_model_name(name: str) -> str:
    """``name`` if Triton can serve a model under it, else ArtifactError saying what is allowed.

    It becomes a folder (so no ``/``, ``\\``, ``..`` or hidden name) and a URL path segment.
    """
    if not _NAME.fullmatch(name):
        raise ArtifactError(
            f"model name {name!r} cannot be a Triton model folder: use 1 to 255 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def _tensors(values: list[onnx.ValueInfoProto], kind: str, where: Path) -> list[tuple[str, str, list[int]]]:
    """(name, Triton data type, full dims with -1 for a free dimension) of each graph input or output."""
    tensors = []
    for value in values:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            raise ArtifactError(f"{where}: {kind} {value.name!r} has no tensor shape; Triton needs one")
        data_type = _TRITON_TYPES.get(tensor.elem_type)
        if data_type is None:
            element = onnx.TensorProto.DataType.Name(tensor.elem_type)
            raise ArtifactError(f"{where}: {kind} {value.name!r} has element type {element}, which Triton lacks")
        dims = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in tensor.shape.dim]
        if not dims:
            raise ArtifactError(f"{where}: {kind} {value.name!r} is a scalar; a served model's tensors have a batch")
        tensors.append((value.name, data_type, dims))
    return tensors


def _section(kind: str, tensors: list[tuple[str, str, list[int]]]) -> list[str]:
    entries = [
        f'  {{\n    name: "{name}"\n    data_type: {data_type}\n    dims: [ {", ".join(map(str, dims))} ]\n  }}'
        for name, data_type, dims in tensors
    ]
    return [f"{kind} [", ",\n".join(entries), "]"]


def triton_config(model: onnx.ModelProto, name: str, *, where: Path) -> str:
    """The ``config.pbtxt`` text for serving ``model`` as ``name`` (module docstring: the choices)."""
    initializers = {init.name for init in model.graph.initializer}  # old exporters list weights as inputs
    inputs = _tensors([v for v in model.graph.input if v.name not in initializers], "input", where)
    outputs = _tensors(list(model.graph.output), "output", where)
    if not inputs or not outputs:
        raise ArtifactError(f"{where}: the graph has no {'inputs' if not inputs else 'outputs'}")
    lines = [
        f"# Written by vflserver.inference.triton_repository from {MODEL_FILE}; derived from its graph.",
        "# max_batch_size 0: dims are full shapes, -1 is the batch (see the module's docstring).",
        f'name: "{check_model_name(name)}"',
        f'platform: "{PLATFORM}"',
        "max_batch_size: 0",
        *_section("input", inputs),
        *_section("output", outputs),
    ]
    return "\n".join(lines) + "\n"


def write_triton_repository(model: Path, root: Path, name: str) -> Path:
    """Write ``root/<name>/1/model.onnx`` (a copy of ``model``) and ``root/<name>/config.pbtxt``; the model folder.

    The model folder is built beside ``root`` and renamed into it, so a Triton polling ``root``
    never loads a half-written file or a config that belongs to another model; a folder of that
    name already there is replaced whole (its other versions go too). Nothing is staged inside
    ``root``: Triton takes every folder there for a model, and by default exits when one fails to
    load. Files are readable by others (a model is no secret). ArtifactError names the file if
    ``model`` is not ONNX, or the name if Triton cannot take it.
    """
    check_model_name(name)
    try:
        data = model.read_bytes()
        proto = onnx.load_from_string(data)
    except OSError as exc:
        raise ArtifactError(f"{model}: cannot read the model ({exc.strerror or exc})") from None
    except (DecodeError, ValueError) as exc:
        raise ArtifactError(f"{model}: not an ONNX model ({exc})") from None
    if not proto.graph.node and not proto.graph.output:  # protobuf reads an empty file as an empty model
        raise ArtifactError(f"{model}: not an ONNX model (no graph)")
    config = triton_config(proto, name, where=model)
    root.mkdir(parents=True, exist_ok=True)
    staging = _scratch(root, name)
    try:
        folder = staging / name
        (folder / VERSION).mkdir(parents=True)
        (folder / VERSION / MODEL_FILE).write_bytes(data)
        (folder / CONFIG_FILE).write_text(config)
        for path in (folder, folder / VERSION):
            os.chmod(path, 0o755)
        for path in (folder / VERSION / MODEL_FILE, folder / CONFIG_FILE):
            os.chmod(path, 0o644)
        _swap_in(folder, root / name, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root / name


def _scratch(root: Path, name: str) -> Path:
    """A private folder on ``root``'s file system but outside it (inside only if its parent is read-only)."""
    try:
        return Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.{name}."))
    except PermissionError:
        return Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))


def _swap_in(folder: Path, target: Path, scratch: Path) -> None:
    """Rename ``folder`` to ``target``; a previous ``target`` is moved into ``scratch`` (and goes with it)."""
    if not target.exists():
        os.replace(folder, target)
        return
    old = scratch / "previous"
    os.replace(target, old)  # rename(2) cannot replace a non-empty folder: move it aside first
    try:
        os.replace(folder, target)
    except BaseException:
        os.replace(old, target)
        raise
