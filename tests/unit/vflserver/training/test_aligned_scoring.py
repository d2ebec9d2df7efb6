"""Scoring aligned rows by ID and writing the held-out predictions, without a Python object per row.

``AlignedPredictor`` finds IDs by binary search in sorted numpy strings and ``write_predictions`` writes
through Arrow; both are checked here against what the per-row versions they replaced did (a dict
of every aligned ID, and a loop of f-strings), on small tables.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.halves import ServerAlgorithm
from vflalgorithms.registry import algorithm_spec
from vflcore.job.spec import JobSpec
from vflserver.federation.passive_parties import PassiveParties
from vflserver.training import aligned_predictions
from vflserver.training.aligned_predictions import AlignedPredictor
from vflserver.training.reports import write_predictions

ROWS = 60
#: Aligned IDs in no sorted order, with the awkward cases: unicode, numeric-looking, prefixes.
IDS = [f"c{(i * 37) % ROWS:03d}" for i in range(ROWS - 6)] + ["Zoë", "東京", "7", "07", "c00", 'comma, "quoted"']


def standalone_scorer(ids: Sequence[str] | np.ndarray) -> tuple[AlignedPredictor, ServerAlgorithm]:
    """A AlignedPredictor over an APFed-R active half: a real model that predicts without any passive party."""
    job = JobSpec("scoring-test", algorithm="apfed_r", num_rows=len(ids), num_outputs=3)
    parties = PassiveParties(job)
    features = torch.randn(len(ids), 4, generator=torch.Generator().manual_seed(0))
    context = ActiveContext(
        job=job,
        schedule=job.schedule(),
        parties=parties,
        features=features,
        labels=torch.arange(len(ids)) % 3,
        num_outputs=3,
        top_hidden=(8,),
    )
    algorithm = algorithm_spec(job.algorithm).active_half()(context)
    return AlignedPredictor(job, parties, algorithm, ids), algorithm


def dict_rows(aligned: Sequence[str], wanted: Sequence[object]) -> np.ndarray:
    """What the AlignedPredictor used to do: a dict of every aligned ID."""
    row_of_id = {str(i): n for n, i in enumerate(aligned)}
    return np.asarray([row_of_id[str(i)] for i in wanted], dtype=np.int64)


class TestScorerLookup:
    @pytest.mark.parametrize("as_array", [False, True], ids=["list", "StringDType"])
    def test_rows_equal_the_dict_lookup(self, as_array: bool) -> None:
        """Every aligned ID, asked in a shuffled order with repeats, maps to the row the old dict gave."""
        aligned = np.asarray(IDS, dtype=np.dtypes.StringDType()) if as_array else IDS
        scorer, _ = standalone_scorer(aligned)
        wanted = [IDS[i] for i in np.random.default_rng(1).integers(0, ROWS, size=200)]
        rows, missing = scorer.rows_of(wanted)
        assert missing == 0
        np.testing.assert_array_equal(rows, dict_rows(IDS, wanted))
        assert rows.dtype == np.int64

    @pytest.mark.parametrize("order", ["sorted", "shuffled"])
    def test_sorted_and_unsorted_aligned_ids_are_looked_up_alike(self, order: str) -> None:
        """PSI's order is sorted (the lookup then needs no copy of the IDs); any other order maps right too."""
        shuffled = sorted(IDS) if order == "sorted" else [IDS[i] for i in np.random.default_rng(2).permutation(ROWS)]
        scorer, _ = standalone_scorer(shuffled)
        assert (scorer._order is None) == (order == "sorted")
        wanted = [shuffled[i] for i in np.random.default_rng(1).integers(0, ROWS, size=200)]
        rows, missing = scorer.rows_of(wanted)
        assert missing == 0
        np.testing.assert_array_equal(rows, dict_rows(shuffled, wanted))
        assert scorer.rows_of(["not aligned", *wanted])[1] == 1

    def test_predictions_by_id_equal_those_by_row(self) -> None:
        """``predict_ids`` gives the model's output on the rows the old lookup found."""
        scorer, algorithm = standalone_scorer(IDS)
        wanted = ["東京", "c007", "07", "7"]
        expected = algorithm.predict(dict_rows(IDS, wanted), {}).numpy()
        np.testing.assert_array_equal(scorer.predict_ids(wanted), expected)

    def test_non_string_ids_are_looked_up_as_their_str(self) -> None:
        """An integer asked for finds the ID written with its digits, as ``str(i)`` always did."""
        scorer, _ = standalone_scorer(IDS)
        rows, missing = scorer.rows_of(np.asarray([7], dtype=object))
        assert missing == 0 and rows.tolist() == [IDS.index("7")]

    def test_unknown_ids_are_counted_never_named(self) -> None:
        """IDs outside the alignment raise the same KeyError as before: how many, not which."""
        scorer, _ = standalone_scorer(IDS)
        with pytest.raises(KeyError) as caught:
            scorer.predict_ids(["c001", "nobody", "東京", "zzzz-after-every-id", ""])
        assert caught.value.args[0] == "3 of the 5 IDs cannot be served"
        assert "nobody" not in str(caught.value)

    def test_no_ids_give_no_rows(self) -> None:
        """An empty request is served as empty."""
        scorer, _ = standalone_scorer(IDS)
        assert scorer.predict_ids([]).shape == (0, 3)

    def test_large_requests_are_served_block_by_block(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Above BLOCK_ROWS rows the output is each block's output, in order, row for row."""
        scorer, algorithm = standalone_scorer(IDS)
        monkeypatch.setattr(aligned_predictions, "BLOCK_ROWS", 7)
        rows = np.random.default_rng(2).permutation(ROWS)
        blocks = [algorithm.predict(rows[start : start + 7], {}).numpy() for start in range(0, ROWS, 7)]
        np.testing.assert_array_equal(scorer.predict_rows(rows), np.concatenate(blocks))


def loop_predictions(path: Path, task: str, ids: Sequence[str], labels: np.ndarray, output: np.ndarray) -> None:
    """What ``write_predictions`` used to do: a line per row from an f-string."""
    predicted = output.argmax(axis=1) if task == "classification" else output.reshape(-1)
    with path.open("w") as fh:
        fh.write("id,label,prediction\n")
        for i, y, p in zip(ids, labels, predicted, strict=True):
            fh.write(f"{i},{y},{p}\n")


class TestWritePredictions:
    PLAIN_IDS = [f"customer-{i:04d}" for i in range(40)] + ["Zoë", "東京", "07", ""]

    def test_classification_matches_the_loop_byte_for_byte(self, tmp_path: Path) -> None:
        """Class labels and argmax predictions are written exactly as the per-row loop wrote them."""
        rng = np.random.default_rng(3)
        labels = rng.integers(0, 10, size=len(self.PLAIN_IDS)).astype(np.int64)
        output = rng.standard_normal((len(self.PLAIN_IDS), 10)).astype(np.float32)
        write_predictions(tmp_path, "classification", self.PLAIN_IDS, labels, output)
        loop_predictions(tmp_path / "loop.csv", "classification", self.PLAIN_IDS, labels, output)
        assert (tmp_path / "test_predictions.csv").read_bytes() == (tmp_path / "loop.csv").read_bytes()

    def test_regression_matches_the_loop_byte_for_byte(self, tmp_path: Path) -> None:
        """Float32 targets and predictions are written as the f-strings wrote them, tiny and huge values included."""
        n = len(self.PLAIN_IDS)
        rng = np.random.default_rng(4)
        labels = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, size=n)).astype(np.float32)
        output = rng.standard_normal((n, 1)).astype(np.float32)
        output[:4, 0] = [1e-5, 1e20, -0.0, 123456789.0]
        ids = np.asarray(self.PLAIN_IDS, dtype=np.dtypes.StringDType())
        write_predictions(tmp_path, "regression", ids, labels, output)
        loop_predictions(tmp_path / "loop.csv", "regression", self.PLAIN_IDS, labels, output)
        assert (tmp_path / "test_predictions.csv").read_bytes() == (tmp_path / "loop.csv").read_bytes()

    def test_ids_with_commas_or_quotes_are_quoted(self, tmp_path: Path) -> None:
        """An ID the loop would have split across columns is quoted as ``csv`` quotes it, and reads back whole."""
        ids = ["comma, inside", 'say "hi"', "plain"]
        write_predictions(tmp_path, "classification", ids, np.arange(3), np.eye(3, dtype=np.float32))
        with (tmp_path / "test_predictions.csv").open(newline="") as fh:
            rows = list(csv.reader(fh))
        assert rows == [["id", "label", "prediction"], [ids[0], "0", "0"], [ids[1], "1", "1"], ["plain", "2", "2"]]

    def test_lengths_must_agree(self, tmp_path: Path) -> None:
        """IDs, labels and predictions of different lengths are refused, naming the file."""
        with pytest.raises(ValueError, match=r"test_predictions\.csv: 2 IDs, 3 labels and 3 predictions"):
            write_predictions(tmp_path, "classification", ["a", "b"], np.arange(3), np.eye(3, dtype=np.float32))

    def test_no_rows_give_the_header_alone(self, tmp_path: Path) -> None:
        """No held-out rows: the file has its header only."""
        write_predictions(tmp_path, "classification", [], np.zeros(0, np.int64), np.zeros((0, 3), np.float32))
        assert (tmp_path / "test_predictions.csv").read_bytes() == b"id,label,prediction\n"
