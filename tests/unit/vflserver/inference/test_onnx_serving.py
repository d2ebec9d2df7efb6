"""The standalone ONNX model behind the inference endpoints: it answers what the torch model computes.

Each model here is exported the way the active party exports an APFed model: ``export_onnx`` with
softmax and argmax inside the graph, and ``info_metadata`` in the file. ``load_servable`` must
find it as a file, in a Triton repository (root, model folder, version folder) and in a run
folder, and must still serve a legacy ``model.safetensors``; everything else is refused with an
``ArtifactError`` that names the file.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from vflcore.errors import ArtifactError, InferenceInputError
from vflcore.ml.models import build_seeded, mlp
from vflcore.ml.onnx_export import MODEL_FILE
from vflserver.inference.artifact import LABEL, PREDICTION, PROBABILITIES, ArtifactServable, save_artifact
from vflserver.inference.onnx_model import OnnxServable, info_metadata, is_standalone, load_servable, read_info
from vflserver.inference.servable import TensorSpec, computes_inline
from vflserver.inference.triton_repository import write_triton_repository
from vfltesting.onnx_models import (
    CLASSES,
    FEATURES,
    Reference,
    artifact_info,
    export_standalone,
    feature_rows,
)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Reference]:
    path = tmp_path_factory.mktemp("classifier") / MODEL_FILE
    return path, export_standalone(path, "classification")


@pytest.fixture(scope="module")
def regressor(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Reference]:
    path = tmp_path_factory.mktemp("regressor") / MODEL_FILE
    return path, export_standalone(path, "regression")


class TestOnnxServable:
    def test_classifier_answers_what_torch_computes(self, classifier: tuple[Path, Reference]) -> None:
        path, reference = classifier
        features = feature_rows(64, seed=2)
        got, want = OnnxServable(path).predict({"features": features}), reference(features)
        assert set(got) == {PROBABILITIES, LABEL}
        assert got[PROBABILITIES].dtype == np.float32 and got[PROBABILITIES].shape == (64, CLASSES)
        assert got[LABEL].dtype == np.int64 and got[LABEL].shape == (64,)
        np.testing.assert_allclose(got[PROBABILITIES], want[PROBABILITIES], atol=1e-5, rtol=0)
        np.testing.assert_array_equal(got[LABEL], want[LABEL])

    def test_regressor_answers_what_torch_computes(self, regressor: tuple[Path, Reference]) -> None:
        path, reference = regressor
        features = feature_rows(32, seed=3)
        got, want = OnnxServable(path).predict({"features": features}), reference(features)
        assert set(got) == {PREDICTION} and got[PREDICTION].shape == (32, 1)
        np.testing.assert_allclose(got[PREDICTION], want[PREDICTION], atol=1e-5, rtol=1e-5)

    def test_one_row_and_a_non_contiguous_batch(self, classifier: tuple[Path, Reference]) -> None:
        path, reference = classifier
        servable = OnnxServable(path)
        wide = feature_rows(8, seed=4).repeat(2, axis=1)[:, ::2]  # a strided view, as a decoded request may be
        np.testing.assert_array_equal(servable.predict({"features": wide})[LABEL], reference(wide.copy())[LABEL])
        assert servable.predict({"features": wide[:1]})[LABEL].shape == (1,)

    def test_declares_the_contract_from_its_metadata(self, classifier: tuple[Path, Reference]) -> None:
        servable = OnnxServable(classifier[0])
        assert servable.name == "cla-job" and servable.version == "1" and servable.platform == "onnxruntime_onnx"
        assert servable.inputs == [TensorSpec("features", "FP32", (-1, FEATURES))]
        assert servable.outputs == [
            TensorSpec(PROBABILITIES, "FP32", (-1, CLASSES)),
            TensorSpec(LABEL, "INT64", (-1,)),
        ]
        assert servable.ready() and computes_inline(servable)
        assert servable.info == artifact_info("classification")
        assert OnnxServable(classifier[0], name="other").name == "other"

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_non_finite_input_is_refused(self, classifier: tuple[Path, Reference], bad: float) -> None:
        features = feature_rows(2, seed=5)
        features[1, 3] = bad
        with pytest.raises(InferenceInputError, match=r"input 'features'.*finite"):
            OnnxServable(classifier[0]).predict({"features": features})

    def test_metadata_round_trips(self, classifier: tuple[Path, Reference]) -> None:
        assert read_info(classifier[0]) == artifact_info("classification")
        assert is_standalone(classifier[0])


class TestLoadServable:
    def test_the_onnx_file(self, classifier: tuple[Path, Reference]) -> None:
        servable = load_servable(classifier[0])
        assert isinstance(servable, OnnxServable) and servable.name == "cla-job"

    @pytest.mark.parametrize("where", ["root", "model folder", "version folder"])
    def test_a_triton_repository(self, classifier: tuple[Path, Reference], tmp_path: Path, where: str) -> None:
        path, reference = classifier
        folder = write_triton_repository(path, tmp_path / "repository", "digits")
        target = {"root": tmp_path / "repository", "model folder": folder, "version folder": folder / "1"}[where]
        servable = load_servable(target)
        assert servable.name == "digits"  # the folder's name, as Triton names the model
        features = feature_rows(5, seed=6)
        np.testing.assert_array_equal(servable.predict({"features": features})[LABEL], reference(features)[LABEL])
        assert load_servable(target, name="job-7").name == "job-7"

    def test_the_highest_version_is_served(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        folder = write_triton_repository(classifier[0], tmp_path, "m")
        (folder / "2").mkdir()
        (folder / "2" / MODEL_FILE).write_bytes(classifier[0].read_bytes())
        (folder / "10").mkdir()
        export_standalone(folder / "10" / MODEL_FILE, "regression")
        assert load_servable(folder).outputs[0].name == PREDICTION  # versions are numbers: 10 > 2, not "2" > "10"

    def test_a_run_folder_holding_model_onnx(self, classifier: tuple[Path, Reference]) -> None:
        assert load_servable(classifier[0].parent).name == "cla-job"

    def test_a_repository_with_several_models_names_them(
        self, classifier: tuple[Path, Reference], tmp_path: Path
    ) -> None:
        for name in ("a", "b"):
            write_triton_repository(classifier[0], tmp_path, name)
        with pytest.raises(ArtifactError, match=r"holds 2 models \(a, b\); pass the model's folder"):
            load_servable(tmp_path)

    def test_a_folder_with_no_model(self, tmp_path: Path) -> None:
        with pytest.raises(ArtifactError, match=re.escape(f"{tmp_path}: neither a Triton model repository")):
            load_servable(tmp_path)

    def test_a_legacy_safetensors_artifact_still_serves(self, tmp_path: Path) -> None:
        network = build_seeded(lambda: mlp(FEATURES, (8,), CLASSES), 0).eval()
        path = save_artifact(tmp_path / "model.safetensors", network, artifact_info("classification"))
        servable = load_servable(path)
        assert isinstance(servable, ArtifactServable) and servable.name == "cla-job"
        features = feature_rows(10, seed=7)
        with torch.no_grad():
            logits = network(torch.from_numpy(features))
        got = servable.predict({"features": features})
        np.testing.assert_allclose(got[PROBABILITIES], torch.softmax(logits, dim=1).numpy(), atol=1e-6)
        np.testing.assert_array_equal(got[LABEL], logits.argmax(dim=1).numpy())

    @pytest.mark.parametrize("content", [b"", b"not a model at all \x00\x01\x02", b"\x08\x07" * 10])
    def test_a_file_that_is_not_onnx_is_refused_by_name(self, tmp_path: Path, content: bytes) -> None:
        path = tmp_path / "garbage.onnx"
        path.write_bytes(content)
        with pytest.raises(ArtifactError, match=re.escape(f"{path}: ")) as caught:
            load_servable(path)
        assert "model.onnx" in str(caught.value)  # says what to pass instead
        assert not is_standalone(path)

    def test_a_missing_file_is_refused_by_name(self, tmp_path: Path) -> None:
        with pytest.raises(ArtifactError, match=re.escape(f"{tmp_path / 'absent.onnx'}: no such file")):
            load_servable(tmp_path / "absent.onnx")
        assert not is_standalone(tmp_path / "absent.onnx")

    def test_an_onnx_model_that_is_not_standalone_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / MODEL_FILE
        export_standalone(path, "classification", metadata={"vfl.party": "1"})  # a federated party's part
        assert not is_standalone(path)
        with pytest.raises(ArtifactError, match=re.escape(f"{path}: not a standalone model")):
            load_servable(path)

    def test_metadata_that_disagrees_with_the_graph_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / MODEL_FILE
        export_standalone(path, "classification", metadata=info_metadata(artifact_info("classification", features=5)))
        with pytest.raises(ArtifactError, match=re.escape(f"{path}: the graph does not match its metadata")):
            OnnxServable(path)

    def test_incomplete_metadata_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / MODEL_FILE
        export_standalone(path, "classification", metadata={"vfl.format": "vfl-onnx/1", "vfl.info": "{}"})
        expected = re.escape(f"{path}: the model's 'vfl.info' metadata is missing or incomplete")
        with pytest.raises(ArtifactError, match=expected):
            load_servable(path)

    def test_a_newer_format_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / MODEL_FILE
        export_standalone(path, "regression", metadata={"vfl.format": "vfl-onnx/2"})
        with pytest.raises(ArtifactError, match="format is 'vfl-onnx/2', this server reads 'vfl-onnx/1'"):
            load_servable(path)
