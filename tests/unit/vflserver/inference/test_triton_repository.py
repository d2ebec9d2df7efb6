"""The Triton model repository: ``config.pbtxt`` must describe exactly the graph next to it.

The config is parsed with Triton's own ``ModelConfig`` protobuf (from ``tritonclient``), so a
field name or enum value Triton does not know fails here, and its inputs and outputs are
compared with the ONNX graph's as read by ``onnx``: names, data types and full shapes
(``max_batch_size`` 0, the batch as -1). The models are exported the way the active party
exports a standalone model (``export_onnx``, softmax and argmax inside the graph).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import onnx
import pytest
import torch
from google.protobuf import text_format
from torch import nn
from tritonclient.grpc import model_config_pb2

from vflcore.errors import ArtifactError
from vflcore.ml.models import build_seeded
from vflcore.ml.onnx_export import MODEL_FILE, OnnxPart, export_onnx
from vflserver.inference.artifact import ArtifactInfo
from vflserver.inference.onnx_model import info_metadata
from vflserver.inference.triton_repository import check_model_name, write_triton_repository

FEATURES, CLASSES = 5, 4
#: What Triton calls each ONNX element type the contract uses (the model-configuration guide's table).
TRITON_TYPE = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.INT64: "TYPE_INT64"}


class _ConvNet(nn.Module):
    """Conv1d over the features, LayerNorm, then a linear head of ``outputs`` values."""

    def __init__(self, outputs: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 3, kernel_size=2)
        self.norm = nn.LayerNorm(3 * (FEATURES - 1))
        self.head = nn.Linear(3 * (FEATURES - 1), outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x.unsqueeze(1)).flatten(1))))


def _export(path: Path, task: str) -> Path:
    outputs = CLASSES if task == "classification" else 1
    network = build_seeded(lambda: _ConvNet(outputs), 0).eval().requires_grad_(False)

    def forward(features: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        out = network(features)
        return (torch.softmax(out, dim=1), out.argmax(dim=1)) if task == "classification" else out

    names = ("probabilities", "label") if task == "classification" else ("prediction",)
    info = ArtifactInfo("m", "job", "apfed_c", task, tuple(f"f{i}" for i in range(FEATURES)), outputs)
    probe = torch.randn(8, FEATURES, generator=torch.Generator().manual_seed(1))
    export_onnx(OnnxPart(forward, {"features": probe}, names, info_metadata(info)), path)
    return path


@pytest.fixture(scope="module", params=["classification", "regression"])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    task: str = request.param
    return task, _export(tmp_path_factory.mktemp(task) / MODEL_FILE, task)


def _config(folder: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def _graph_tensors(values: list[onnx.ValueInfoProto]) -> list[tuple[str, str, list[int]]]:
    return [
        (
            value.name,
            TRITON_TYPE[value.type.tensor_type.elem_type],
            [dim.dim_value if dim.HasField("dim_value") else -1 for dim in value.type.tensor_type.shape.dim],
        )
        for value in values
    ]


def _config_tensors(tensors: list[model_config_pb2.ModelInput] | list[model_config_pb2.ModelOutput]) -> list[tuple]:
    return [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensors]


class TestConfig:
    def test_inputs_and_outputs_are_the_graphs(self, exported: tuple[str, Path], tmp_path: Path) -> None:
        _, model = exported
        config = _config(write_triton_repository(model, tmp_path, "job-1"))
        graph = onnx.load(str(model)).graph
        assert config.name == "job-1" and config.platform == "onnxruntime_onnx" and not config.backend
        assert config.max_batch_size == 0  # dims are full shapes: [batch] outputs need no reshape
        assert _config_tensors(list(config.input)) == _graph_tensors(list(graph.input))
        assert _config_tensors(list(config.output)) == _graph_tensors(list(graph.output))
        assert not any(t.HasField("reshape") for t in [*config.input, *config.output])

    def test_the_contract_in_triton_terms(self, exported: tuple[str, Path], tmp_path: Path) -> None:
        """Independent of the graph: what a Triton client of the served model sees."""
        task, model = exported
        config = _config(write_triton_repository(model, tmp_path, "job-1"))
        assert _config_tensors(list(config.input)) == [("features", "TYPE_FP32", [-1, FEATURES])]
        if task == "classification":
            assert _config_tensors(list(config.output)) == [
                ("probabilities", "TYPE_FP32", [-1, CLASSES]),
                ("label", "TYPE_INT64", [-1]),
            ]
        else:
            assert _config_tensors(list(config.output)) == [("prediction", "TYPE_FP32", [-1, 1])]


class TestLayout:
    def test_model_folder_holds_config_and_version_one(self, exported: tuple[str, Path], tmp_path: Path) -> None:
        _, model = exported
        root = tmp_path / "repository"
        folder = write_triton_repository(model, root, "job-1")
        assert folder == root / "job-1"
        assert sorted(os.listdir(root)) == ["job-1"]  # nothing staged inside the repository
        assert sorted(os.listdir(tmp_path)) == ["repository"]  # nor left beside it
        assert sorted(os.listdir(folder)) == ["1", "config.pbtxt"]
        assert os.listdir(folder / "1") == [MODEL_FILE]
        assert (folder / "1" / MODEL_FILE).read_bytes() == model.read_bytes()
        for path in (folder / "config.pbtxt", folder / "1" / MODEL_FILE):
            assert stat.S_IMODE(path.stat().st_mode) == 0o644

    def test_writing_again_replaces_the_model_folder(self, tmp_path: Path) -> None:
        first = _export(tmp_path / "a.onnx", "classification")
        second = _export(tmp_path / "b.onnx", "regression")
        root = tmp_path / "repository"
        write_triton_repository(first, root, "m")
        (root / "m" / "2").mkdir()  # a stale version would be served instead of the new one
        folder = write_triton_repository(second, root, "m")
        assert (folder / "1" / MODEL_FILE).read_bytes() == second.read_bytes()
        assert sorted(os.listdir(folder)) == ["1", "config.pbtxt"]
        assert [o.name for o in _config(folder).output] == ["prediction"]
        assert sorted(os.listdir(tmp_path)) == ["a.onnx", "b.onnx", "repository"]


class TestRefusals:
    @pytest.mark.parametrize("name", ["", "a/b", "..", ".", ".hidden", "a\\b", "has space", "-x", "x" * 256])
    def test_a_name_triton_cannot_take(self, exported: tuple[str, Path], tmp_path: Path, name: str) -> None:
        with pytest.raises(ArtifactError, match=re.escape(f"model name {name!r} cannot be a Triton model folder")):
            write_triton_repository(exported[1], tmp_path / "repository", name)
        assert not (tmp_path / "repository").exists()

    @pytest.mark.parametrize("name", ["job-1", "digits_apfed.v2", "A", "x" * 255])
    def test_names_triton_takes(self, name: str) -> None:
        assert check_model_name(name) == name

    def test_a_file_that_is_not_onnx(self, tmp_path: Path) -> None:
        path = tmp_path / "model.onnx"
        path.write_bytes(b"\x00\x01 not a model")
        with pytest.raises(ArtifactError, match=re.escape(f"{path}: not an ONNX model")):
            write_triton_repository(path, tmp_path / "repository", "m")

    def test_a_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ArtifactError, match=re.escape(f"{tmp_path / 'absent.onnx'}: cannot read the model")):
            write_triton_repository(tmp_path / "absent.onnx", tmp_path / "repository", "m")
