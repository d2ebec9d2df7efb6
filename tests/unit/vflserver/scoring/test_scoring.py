"""``vfl-score`` on the local engine: the scores the model computes, next to their IDs, and clear refusals.

The model is exported the way an APFed job exports the active party's model (``export_standalone``
from the ONNX serving tests). Ray Data's side, and its equality with this one, is in
``tests/integration/inference/test_ray_engine.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vflcore.errors import ArtifactError, DataError
from vflcore.ml.onnx_export import MODEL_FILE
from vflcore.runtime.compute import LOCAL
from vflserver.inference.triton_repository import write_triton_repository
from vflserver.scoring.cli import main
from vflserver.scoring.engines import score_table_folder
from vflserver.scoring.model import ROWS_PER_RUN, ScoringModel
from vfltesting.onnx_models import Reference, customers, export_standalone, feature_names, write_input

# The command-line tests set up logging on pytest's captured stderr; put it back (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("restore_logging")

NAMES = feature_names()


def features_of(table: pa.Table) -> np.ndarray:
    return np.column_stack([table.column(n).to_numpy().astype(np.float32) for n in NAMES])


def read_output(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(folder.rglob("*.parquet"))])


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Reference]:
    path = tmp_path_factory.mktemp("model") / MODEL_FILE
    return path, export_standalone(path, "classification")


class TestLocalScoring:
    def test_scores_are_the_models_next_to_their_ids(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """Every row of every file and row group is scored in input order, its ID kept, as torch computes it."""
        model_path, reference = classifier
        tables = {"a.parquet": customers(1500, 1), "nested/b.parquet": customers(40, 2, prefix="d")}
        source = write_input(tmp_path / "in", tables)
        report = score_table_folder(ScoringModel.load(model_path), source, tmp_path / "out", engine=LOCAL)
        assert (report.units, report.rows) == (4, 1540)  # a.parquet holds 3 row groups of 700
        names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.parquet"))
        assert names == ["a.00000.parquet", "a.00001.parquet", "a.00002.parquet", "nested/b.00000.parquet"]
        out = read_output(tmp_path / "out")
        assert out.column_names == ["id", "probability_0", "probability_1", "probability_2", "label"]
        inputs = pa.concat_tables(tables.values())
        assert out.column("id").to_pylist() == inputs.column("id").to_pylist()
        expected = reference(features_of(inputs))
        probabilities = np.column_stack([out.column(f"probability_{k}").to_numpy() for k in range(3)])
        np.testing.assert_allclose(probabilities, expected["probabilities"], atol=1e-5)
        assert out.column("label").to_numpy().tolist() == expected["label"].tolist()

    def test_a_row_scores_the_same_in_any_unit_with_the_same_runs(
        self, classifier: tuple[Path, Reference], tmp_path: Path
    ) -> None:
        """Runs of ROWS_PER_RUN rows from a unit's first row: a unit longer than one run splits where expected."""
        model = ScoringModel.load(classifier[0])
        features = features_of(customers(ROWS_PER_RUN + 5, 3))
        whole = model.score(model.session(), features)
        first = model.score(model.session(), features[:ROWS_PER_RUN])
        tail = model.score(model.session(), features[ROWS_PER_RUN:])
        for name, values in whole.items():
            assert np.array_equal(values, np.concatenate([first[name], tail[name]])), name

    def test_a_triton_repository_and_the_cli(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """--model takes the Triton repository vfl-serve takes; the command prints what it did and exits 0."""
        write_triton_repository(classifier[0], tmp_path / "repo", "churn")
        source = write_input(tmp_path / "in", {"a.parquet": customers(30, 4)})
        code = main(["--model", str(tmp_path / "repo"), "--input", str(source), "--output", str(tmp_path / "out")])
        assert code == 0
        assert read_output(tmp_path / "out").num_rows == 30

    def test_a_regressor_writes_its_prediction(self, tmp_path: Path) -> None:
        """A regression model's one output is the column ``prediction``."""
        export_standalone(tmp_path / MODEL_FILE, "regression")
        source = write_input(tmp_path / "in", {"a.parquet": customers(20, 5)})
        score_table_folder(ScoringModel.load(tmp_path / MODEL_FILE), source, tmp_path / "out", engine=LOCAL)
        assert read_output(tmp_path / "out").column_names == ["id", "prediction"]


class TestRefusals:
    def run(self, model: Path, source: Path, output: Path) -> None:
        score_table_folder(ScoringModel.load(model), source, output, engine=LOCAL)

    def test_a_missing_model_is_named(self, tmp_path: Path) -> None:
        """A model path that is not there is an ArtifactError naming it."""
        with pytest.raises(ArtifactError, match=rf"{tmp_path / 'nope.onnx'}: no such file or folder"):
            ScoringModel.load(tmp_path / "nope.onnx")

    def test_missing_feature_columns_are_all_named(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """An input without some of the model's features names the file and every missing column."""
        source = write_input(tmp_path / "in", {"a.parquet": customers(10, 6).drop_columns(["f2", "f4"])})
        with pytest.raises(DataError, match=r"a\.parquet: missing 2 of the model's 6 feature columns: 'f2', 'f4'"):
            self.run(classifier[0], source, tmp_path / "out")

    def test_an_empty_input_is_refused(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """No Parquet files, or files with no rows, is an error, not an empty output."""
        (tmp_path / "empty").mkdir()
        with pytest.raises(DataError, match=r"no \.parquet files in this folder"):
            self.run(classifier[0], tmp_path / "empty", tmp_path / "out")
        source = write_input(tmp_path / "in", {"a.parquet": customers(0, 7)})
        with pytest.raises(DataError, match=r"its 1 Parquet file\(s\) hold no rows"):
            self.run(classifier[0], source, tmp_path / "out")

    def test_a_missing_id_column_says_which_flag(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """An input without the ID column names the column and --id-column."""
        source = write_input(tmp_path / "in", {"a.parquet": customers(5, 8).drop_columns(["id"])})
        with pytest.raises(DataError, match=r"no ID column 'id'; pass --id-column"):
            self.run(classifier[0], source, tmp_path / "out")

    def test_a_bad_value_names_file_column_and_row(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """A NaN, an infinity or a null feature names its file, column and row (counted in its file), not its value."""
        table = customers(1000, 9)
        values = table.column("f3").to_numpy().copy()
        values[812] = np.inf
        infinite = table.set_column(table.schema.get_field_index("f3"), "f3", pa.array(values))
        source = write_input(tmp_path / "in", {"a.parquet": infinite})
        with pytest.raises(DataError, match=r"a\.parquet: feature column 'f3' holds NaN or infinity .* at row 812;"):
            self.run(classifier[0], source, tmp_path / "out")
        nulls = table.set_column(table.schema.get_field_index("f0"), "f0", pa.array([1.0] * 999 + [None]))
        shutil.rmtree(tmp_path / "in")
        source = write_input(tmp_path / "in", {"a.parquet": nulls})
        with pytest.raises(DataError, match=r"feature column 'f0' is empty at row 999"):
            self.run(classifier[0], source, tmp_path / "out2")

    def test_text_features_are_refused(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """A feature column of strings names the column and its type."""
        table = customers(5, 10)
        table = table.set_column(table.schema.get_field_index("f1"), "f1", pa.array(["x"] * 5))
        source = write_input(tmp_path / "in", {"a.parquet": table})
        with pytest.raises(DataError, match=r"feature column 'f1' holds string, not numbers"):
            self.run(classifier[0], source, tmp_path / "out")

    def test_an_output_folder_in_use_is_refused(self, classifier: tuple[Path, Reference], tmp_path: Path) -> None:
        """Scores never mix with an earlier run's files."""
        source = write_input(tmp_path / "in", {"a.parquet": customers(5, 11)})
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "old.parquet").write_bytes(b"")
        with pytest.raises(DataError, match="already holds files"):
            self.run(classifier[0], source, tmp_path / "out")

    def test_the_cli_exits_2_naming_the_problem(
        self, classifier: tuple[Path, Reference], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A bad input stops vfl-score with exit code 2 and the message on stderr."""
        source = write_input(tmp_path / "in", {"a.parquet": customers(5, 12).drop_columns(["f5"])})
        code = main(["--model", str(classifier[0]), "--input", str(source), "--output", str(tmp_path / "out")])
        assert code == 2
        assert "missing 1 of the model's 6 feature columns: 'f5'" in capsys.readouterr().err
