"""Tests for vfltesting.datasets and the example data script: vertical splits that read back intact."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from vflcore.data.tables import PartyTable, align_rows, ids_digest, read_party_csv
from vfltesting.datasets import (
    example_id,
    example_ids,
    write_diabetes_split,
    write_digits_split,
    write_synthetic_split,
    write_vertical_split,
)
from vfltesting.paths import REPO_ROOT


def read_aligned(paths: list[Path]) -> list[PartyTable]:
    """Read party 1 with its label column and the rest as passive parties, then align all."""
    return [align_rows(read_party_csv(path, label_column="label" if k == 0 else None)) for k, path in enumerate(paths)]


class TestWriteVerticalSplit:
    def test_round_trip_and_party_orders(self, tmp_path: Path) -> None:
        """Each party gets its columns, party 1 the labels, and every file its own row order."""
        features = np.arange(40, dtype=np.float64).reshape(10, 4) / 8
        labels = np.arange(10, dtype=np.int64) % 3
        paths = write_vertical_split(
            tmp_path,
            features=features,
            labels=labels,
            feature_names=["a", "b", "c", "d"],
            party_columns=[[0], [1, 2], [3]],
            seed=0,
        )
        assert [p.name for p in paths] == ["party1.csv", "party2.csv", "party3.csv"]
        raw = [read_party_csv(p, label_column="label" if k == 0 else None) for k, p in enumerate(paths)]
        assert len({tuple(t.ids.tolist()) for t in raw}) == 3
        tables = [align_rows(t) for t in raw]
        # aligned rows are in the IDs' sorted order: row 6's non-ASCII ID sorts after the cust- IDs
        order = sorted(range(10), key=example_id)
        assert tables[0].ids.tolist() == [example_id(i) for i in order]
        assert tables[0].labels is not None
        np.testing.assert_array_equal(tables[0].labels, labels[order])
        assert [t.feature_names for t in tables] == [("a",), ("b", "c"), ("d",)]
        np.testing.assert_array_equal(np.hstack([t.features for t in tables]), features[order].astype(np.float32))

    def test_ids_with_commas_quotes_and_spaces_read_back(self, tmp_path: Path) -> None:
        """Caller-given IDs that CSV must quote come back exactly, and align across the parties."""
        ids = ["a,b", 'say "hi"', " padded ", "plain", 'ünï, "cødé"']
        paths = write_vertical_split(
            tmp_path,
            features=np.arange(10, dtype=np.float64).reshape(5, 2),
            labels=np.arange(5, dtype=np.int64),
            feature_names=["a", "b"],
            party_columns=[[0], [1]],
            seed=3,
            ids=ids,
        )
        tables = read_aligned(paths)
        assert [t.ids.tolist() for t in tables] == [sorted(ids)] * 2
        assert tables[0].labels is not None
        assert tables[0].labels.tolist() == [ids.index(i) for i in sorted(ids)]

    def test_example_ids_are_long_distinct_and_partly_non_ascii(self) -> None:
        """The default IDs are e-mail-like, 24 bytes or more, distinct, every 7th non-ASCII, the same every call."""
        ids = example_ids(5000)
        assert len(set(ids)) == 5000 and ids == example_ids(5000)
        assert min(len(i.encode()) for i in ids) >= 24 and all("@" in i for i in ids)
        assert [n for n, i in enumerate(ids[:21]) if not i.isascii()] == [6, 13, 20]
        assert ids[123] == "cust-0000123@retail-banking.example.com"

    def test_ids_must_be_distinct_and_one_per_row(self, tmp_path: Path) -> None:
        """A repeated or missing ID is refused before anything is written."""
        for ids in (["x", "x"], ["x"]):
            with pytest.raises(ValueError, match="2 distinct strings"):
                write_vertical_split(
                    tmp_path,
                    features=np.ones((2, 2)),
                    labels=np.zeros(2, dtype=np.int64),
                    feature_names=["a", "b"],
                    party_columns=[[0], [1]],
                    seed=0,
                    ids=ids,
                )

    def test_label_only_active_party_and_float_labels(self, tmp_path: Path) -> None:
        """Party 1 may hold no features, and float labels survive at float64 precision."""
        labels = np.array([0.1, 1 / 3, -2.5e-7])
        paths = write_vertical_split(
            tmp_path,
            features=np.ones((3, 2)),
            labels=labels,
            feature_names=["a", "b"],
            party_columns=[[], [0, 1]],
            seed=1,
        )
        active = align_rows(read_party_csv(paths[0], label_column="label"))
        assert active.features.shape == (3, 0)
        assert active.labels is not None
        np.testing.assert_array_equal(active.labels, labels)

    @pytest.mark.parametrize(
        ("party_columns", "message"),
        [
            ([[0, 1]], "at least one passive party"),
            ([[0], []], "passive party 2 has no feature"),
            ([[0], [5]], "outside"),
        ],
    )
    def test_invalid_party_columns(self, tmp_path: Path, party_columns: list[list[int]], message: str) -> None:
        """Splits without a passive party, with an empty passive party or bad indices are rejected."""
        with pytest.raises(ValueError, match=message):
            write_vertical_split(
                tmp_path,
                features=np.ones((2, 2)),
                labels=np.zeros(2, dtype=np.int64),
                feature_names=["a", "b"],
                party_columns=party_columns,
                seed=0,
            )

    def test_label_count_must_match(self, tmp_path: Path) -> None:
        """Labels need one entry per feature row."""
        with pytest.raises(ValueError, match="labels must have shape"):
            write_vertical_split(
                tmp_path,
                features=np.ones((2, 2)),
                labels=np.zeros(3),
                feature_names=["a", "b"],
                party_columns=[[0], [1]],
                seed=0,
            )


class TestWriteDigitsSplit:
    def test_three_strips_reassemble_the_digits(self, tmp_path: Path) -> None:
        """Aligned strips of 24/24/16 pixels reassemble load_digits()/16 with matching ID sets."""
        tables = read_aligned(write_digits_split(tmp_path, seed=0, keep=None))
        assert [t.features.shape for t in tables] == [(1797, 24), (1797, 24), (1797, 16)]
        assert tables[0].feature_names[:2] == ("r0c0", "r0c1") and tables[2].feature_names[-1] == "r7c7"
        assert len({ids_digest(t.ids) for t in tables}) == 1
        order = sorted(range(1797), key=example_id)
        assert tables[0].ids.tolist() == [example_id(i) for i in order]
        digits = load_digits()
        np.testing.assert_allclose(np.hstack([t.features for t in tables]), digits.data[order] / 16, rtol=1e-6)
        assert tables[0].labels is not None
        np.testing.assert_array_equal(tables[0].labels, digits.target[order])

    def test_seed_changes_file_order_only(self, tmp_path: Path) -> None:
        """Another seed writes another row order, but the aligned content is the same."""
        first = write_digits_split(tmp_path / "a", seed=0, keep=None)[1]
        second = write_digits_split(tmp_path / "b", seed=1, keep=None)[1]
        assert first.read_text() != second.read_text()
        one, two = (align_rows(read_party_csv(p)) for p in (first, second))
        np.testing.assert_array_equal(one.features, two.features)


class TestWriteDiabetesSplit:
    def test_standardised_four_three_three(self, tmp_path: Path) -> None:
        """Party 1 holds the standardised target and 4 features, parties 2 and 3 hold 3 each."""
        tables = read_aligned(write_diabetes_split(tmp_path, seed=0))
        assert [t.features.shape for t in tables] == [(442, 4), (442, 3), (442, 3)]
        assert tables[0].feature_names == ("age", "sex", "bmi", "bp")
        features = np.hstack([t.features for t in tables]).astype(np.float64)
        np.testing.assert_allclose(features.mean(axis=0), 0, atol=1e-5)
        np.testing.assert_allclose(features.std(axis=0), 1, atol=1e-5)
        assert tables[0].labels is not None
        assert abs(tables[0].labels.mean()) < 1e-9 and abs(tables[0].labels.std() - 1) < 1e-9


class TestWriteSyntheticSplit:
    def test_rows_features_and_classes(self, tmp_path: Path) -> None:
        """The requested rows, per-party feature counts and class ids are written."""
        tables = read_aligned(
            write_synthetic_split(tmp_path, rows=300, features_per_party=[0, 5, 3], seed=2, classes=3)
        )
        assert [t.features.shape for t in tables] == [(300, 0), (300, 5), (300, 3)]
        assert tables[0].labels is not None
        assert set(tables[0].labels.tolist()) == {0.0, 1.0, 2.0}
        assert len({ids_digest(t.ids) for t in tables}) == 1

    def test_deterministic(self, tmp_path: Path) -> None:
        """The same seed writes byte-identical files."""
        a = write_synthetic_split(tmp_path / "a", rows=50, features_per_party=[2, 2], seed=7)
        b = write_synthetic_split(tmp_path / "b", rows=50, features_per_party=[2, 2], seed=7)
        assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]

    @pytest.mark.parametrize(
        ("features_per_party", "classes", "message"),
        [([4], 2, "at least one passive"), ([1, -1], 2, "non-negative"), ([1, 1], 5, "too few")],
    )
    def test_invalid_arguments(self, tmp_path: Path, features_per_party: list[int], classes: int, message: str) -> None:
        """One party only, negative counts, or too few features for the classes are rejected."""
        with pytest.raises(ValueError, match=message):
            write_synthetic_split(tmp_path, rows=10, features_per_party=features_per_party, seed=0, classes=classes)


class TestMakeDigitsDataScript:
    def test_writes_three_files_and_reports_them(self, tmp_path: Path) -> None:
        """The CLI, run as ``make`` runs it, writes party1..3.csv into --out and prints one line per file."""
        result = subprocess.run(
            [sys.executable, "examples/make_digits_data.py", "--out", str(tmp_path), "--seed", "3"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["party1.csv", "party2.csv", "party3.csv"]
        assert (tmp_path / "party1.csv").read_text().startswith("id,label,r0c0")
        assert result.stdout.count("wrote ") == 3

    def test_task_regression_writes_the_diabetes_files(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--task regression: the diabetes party files, one line each. The script's ``__main__`` in this
        process: a second interpreter (2 CPU-s for its imports) would check the start the test above checks."""
        argv = ["make_digits_data.py", "--task", "regression", "--out", str(tmp_path), "--seed", "3"]
        monkeypatch.setattr(sys, "argv", argv)
        runpy.run_path(str(REPO_ROOT / "examples" / "make_digits_data.py"), run_name="__main__")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["party1.csv", "party2.csv", "party3.csv"]
        assert (tmp_path / "party1.csv").read_text().startswith("id,label,age")
        assert capsys.readouterr().out.count("wrote ") == 3
