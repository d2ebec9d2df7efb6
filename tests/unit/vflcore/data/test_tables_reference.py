"""The columnar reader against the row-by-row reader it replaced, on every table and bad file the suite has.

``vfltesting.reference_tables`` is the old reader, kept as an oracle. Each table below is one the
suite writes (the dataset writers, the PSI tests' csv.writer files, test_data's inline files,
their Parquet copies) or an edge the old reader handled; each must give the same IDs, the same
float32/float64 arrays bit for bit, the same feature names and the same warnings, or the same
message. Every case runs twice: as shipped, and with small pieces and batches, so the readers'
seams (CSV pieces, Parquet batches, exact-scan batches, line-scan chunks) fall inside the files.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import structlog

from vflcore.data import columnar, csv_lines, exact_scan
from vflcore.data.columnar import read_columnar
from vflcore.data.exact_scan import read_exactly
from vflcore.data.tables import DataError, read_party_csv
from vfltesting.datasets import (
    write_cancer_split,
    write_diabetes_split,
    write_digits_quadrants,
    write_digits_split,
    write_synthetic_split,
)
from vfltesting.reference_tables import reference_read_party_csv

Options = dict[str, Any]


#: Piece, batch and chunk sizes: as shipped; a few rows or bytes (inline files); a few hundred (datasets).
SEAMS = {
    "tiny": {"_PIECE_BYTES": 61, "_PARQUET_BATCH_ROWS": 7, "_BLOCK_ROWS": 5, "_BATCH_ROWS": 3, "_CHUNK_BYTES": 5},
    "small": {
        "_PIECE_BYTES": 4093,
        "_PARQUET_BATCH_ROWS": 97,
        "_BLOCK_ROWS": 89,
        "_BATCH_ROWS": 101,
        "_CHUNK_BYTES": 1021,
    },
}


def _set_seams(monkeypatch: pytest.MonkeyPatch, sizes: str | None) -> None:
    if sizes is None:
        return
    for module in (columnar, exact_scan, csv_lines):
        for name, value in SEAMS[sizes].items():
            if hasattr(module, name):
                monkeypatch.setattr(module, name, value)


@pytest.fixture(params=["as shipped", "tiny"])
def tiny_seams(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """As shipped, or with every piece, batch and chunk a few rows or bytes long."""
    _set_seams(monkeypatch, None if request.param == "as shipped" else request.param)


@pytest.fixture(params=["as shipped", "small"])
def small_seams(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """As shipped, or with pieces, batches and chunks a few hundred rows or a few KB long."""
    _set_seams(monkeypatch, None if request.param == "as shipped" else request.param)


def outcome(read: Callable[..., Any], path: Path, options: Options) -> tuple[Any, ...]:
    """What a reader gave: the arrays' exact bytes, dtypes and shapes with the warnings, or the error."""
    with structlog.testing.capture_logs() as logs:
        try:
            table = read(path, **options)
        except (DataError, ValueError) as exc:
            return ("error", type(exc).__name__, str(exc), logs)
    labels = None if table.labels is None else (table.labels.dtype, table.labels.shape, table.labels.tobytes())
    features = (table.features.dtype, table.features.shape, table.features.tobytes())
    return ("table", table.ids.tolist(), features, labels, table.feature_names, logs)


def assert_same(path: Path, options: Options, oracle: dict[tuple[str, str], Any] | None = None) -> tuple[Any, ...]:
    """The new reader (and the exact scan alone) give exactly what the old reader gave, in this version's words.

    ``oracle``: the old reader's outcomes by file and options, for a file read again unchanged (with
    other seams: the old reader has none, so it gives the same outcome every time).
    """
    key = (str(path), repr(sorted(options.items())))
    if oracle is not None and key in oracle:
        expected = oracle[key]
    else:
        expected = in_new_words(path, outcome(reference_read_party_csv, path, options))
        if oracle is not None:
            oracle[key] = expected
    assert outcome(read_party_csv, path, options) == expected
    assert outcome(read_exactly, path, _all_options(options)) == expected
    return expected


def in_new_words(path: Path, expected: tuple[Any, ...]) -> tuple[Any, ...]:
    """The old reader's message as this version words it (issue 36), the rest unchanged.

    A Parquet file's position is its row, not a "line"; a CSV's first byte that is not UTF-8 is
    located by its line, found here the plain way (each line of the bytes decoded in turn).
    """
    if expected[0] != "error":
        return expected
    message = expected[2]
    if path.suffix == ".parquet":
        message = message.replace(f"{path}: line ", f"{path}: row ", 1)
    if "not UTF-8 text (" in message:
        lines = path.read_bytes().splitlines()
        bad = next(number for number, line in enumerate(lines, 1) if not _decodes(line))
        message = message.replace("not UTF-8 text (", f"not UTF-8 text at line {bad} (", 1)
    return (*expected[:2], message, *expected[3:])


def _decodes(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _all_options(options: Options) -> Options:
    return {"id_column": "id", "label_column": None, "feature_columns": None, **options}


def write_csv_rows(path: Path, rows: list[list[Any]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


def as_parquet(path: Path) -> Path:
    """The CSV's table as Parquet: the ID as text, integers as int64, the rest as float64."""
    with path.open(encoding="utf-8", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    columns: dict[str, Any] = {}
    for i, name in enumerate(header):
        cells = [row[i] for row in rows]
        if name == "id":
            columns[name] = pa.array(cells, pa.string())
        elif all(cell.lstrip("-").isdigit() for cell in cells):
            columns[name] = pa.array([int(cell) for cell in cells], pa.int64())
        else:
            columns[name] = pa.array([float(cell) for cell in cells], pa.float64())
    target = path.with_suffix(".parquet")
    pq.write_table(pa.table(columns), target)
    return target


# ---- the tables the suite writes --------------------------------------------------------------

DATASET_WRITERS: dict[str, Callable[[Path], list[Path]]] = {
    "digits": write_digits_split,
    "digits, every row": lambda out: write_digits_split(out, keep=None),
    "digit quadrants": write_digits_quadrants,
    "diabetes": write_diabetes_split,
    "cancer": write_cancer_split,
    "synthetic": lambda out: write_synthetic_split(out, rows=300, features_per_party=[0, 5, 4], seed=3, classes=3),
}


@pytest.fixture(scope="module")
def dataset_files(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[tuple[int, Path]]]:
    """Each dataset's party files, CSV and Parquet copy, written once for the module: both seams read the
    same files, and the old reader's outcome on each is taken once (``ORACLE``). Written per test, the
    files and the old reader's second pass over them cost about 2 CPU-s (2026-11-29)."""
    written: dict[str, list[tuple[int, Path]]] = {}

    def files(dataset: str) -> list[tuple[int, Path]]:
        if dataset not in written:
            out = tmp_path_factory.mktemp("dataset")
            paths = enumerate(DATASET_WRITERS[dataset](out), start=1)
            written[dataset] = [(party, file) for party, path in paths for file in (path, as_parquet(path))]
        return written[dataset]

    return files


#: The old reader's outcome on each of ``dataset_files``'s files (which no test changes).
ORACLE: dict[tuple[str, str], Any] = {}


@pytest.mark.usefixtures("small_seams")
class TestDatasetTables:
    @pytest.mark.parametrize("dataset", sorted(DATASET_WRITERS))
    def test_every_party_file_reads_the_same_columnar(
        self, dataset_files: Callable[[str], list[tuple[int, Path]]], dataset: str
    ) -> None:
        """Each party's CSV and its Parquet copy give the old arrays, and the columnar reader read them itself."""
        for party, file in dataset_files(dataset):
            options: Options = {"label_column": "label"} if party == 1 else {}
            assert assert_same(file, options, ORACLE)[0] == "table"
            assert read_columnar(file, **_all_options(options)) is not None, file

    def test_a_repeated_row_warns_as_before(self, tmp_path: Path) -> None:
        """test_log_secrets's party file with one row repeated at its end: same table, same warning."""
        path = write_digits_split(tmp_path, keep=None)[1]
        path.write_text(path.read_text() + path.read_text().splitlines()[1] + "\n")
        result = assert_same(path, {})
        assert [event["event"] for event in result[-1]] == ["duplicate_ids_dropped"]
        assert read_columnar(path, **_all_options({})) is not None

    def test_labels_only_and_noise_features(self, tmp_path: Path) -> None:
        """test_algorithm_equivalence's labels-only party 1 and test_client_importance's %.6f noise party."""
        paths = write_digits_split(tmp_path, keep=None)
        lines = paths[0].read_text().splitlines()
        header = lines[0].split(",")
        keep = [header.index("id"), header.index("label")]
        labels_only = tmp_path / "labels_only.csv"
        labels_only.write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in lines) + "\n")
        noise_lines = paths[2].read_text().splitlines()
        noise = np.random.default_rng(0).standard_normal((len(noise_lines) - 1, len(noise_lines[0].split(",")) - 1))
        rows = [
            line.split(",", 1)[0] + "," + ",".join(f"{v:.6f}" for v in values)
            for line, values in zip(noise_lines[1:], noise, strict=True)
        ]
        noisy = tmp_path / "noise.csv"
        noisy.write_text("\n".join([noise_lines[0], *rows]) + "\n")
        assert assert_same(labels_only, {"label_column": "label"})[0] == "table"
        assert assert_same(noisy, {})[0] == "table"


PSI_ID_LISTS = {
    "customers": [f"customer-{n:06d}" for n in (5, 1, 5, 2, 9, 1, 5, 3)],
    "unicode": ["Zo\u00eb", "東京", "🦊 fox", "Ωmega-Ω", 'comma, "quoted"', "Zoe\u0308", "naïve-ß", "only-3-😀"],
    "integer-like": ["007", "7", "42", "0042", "0", "1e2", "7.0"],
}


@pytest.mark.usefixtures("tiny_seams")
class TestPsiTables:
    @pytest.mark.parametrize("ids", sorted(PSI_ID_LISTS))
    @pytest.mark.parametrize("label", [False, True])
    def test_csv_writer_files(self, tmp_path: Path, ids: str, label: bool) -> None:
        """test_psi_alignment's files (csv.writer: quoted IDs, \\r\\n, repeats) read the same, CSV and Parquet."""
        rows = [[value, n, *([n % 2] if label else [])] for n, value in enumerate(PSI_ID_LISTS[ids])]
        path = write_csv_rows(tmp_path / "party.csv", [["id", "x", *(["label"] if label else [])], *rows])
        options: Options = {"label_column": "label"} if label else {}
        for file in (path, as_parquet(path)):
            assert assert_same(file, options)[0] == "table"
            assert read_columnar(file, **_all_options(options)) is not None


# ---- test_data's inline files and the edges around them ----------------------------------------

#: (name, file name, bytes, options): every file tests/unit/vflcore/data/test_data.py writes, then edges.
INLINE: list[tuple[str, str, bytes, Options]] = [
    ("ids features labels", "p.csv", b"id,label,a,b\n007,1,0.5,2\nx9,0,1.5,-3e2\n", {"label_column": "label"}),
    ("label only", "p.csv", b"id,label\na,1\nb,2\n", {"label_column": "label"}),
    ("id in the middle", "p.csv", b"a,id,b\n1,u1,2\n", {}),
    ("feature columns chosen", "p.csv", b"id,a,b,c\nu1,1,2,3\n", {"feature_columns": ["c", "a"]}),
    ("bom, padded header, blank lines", "p.csv", "\ufeffuser , a\n\nu1,1\n\nu2,2\n".encode(), {"id_column": "user"}),
    ("empty file", "empty.csv", b"", {}),
    ("header only", "hdr.csv", b"id,a\n", {}),
    ("no id column", "p.csv", b"key,a\nu1,1\n", {}),
    ("no label column", "p.csv", b"id,a\nu1,1\n", {"label_column": "y"}),
    ("no feature column", "p.csv", b"id,a\nu1,1\n", {"feature_columns": ["a", "z"]}),
    ("label as feature", "p.csv", b"id,y\nu1,1\n", {"label_column": "y", "feature_columns": ["y"]}),
    ("feature twice", "p.csv", b"id,a\nu1,1\n", {"feature_columns": ["a", "a"]}),
    ("repeated header name", "p.csv", b"id,a,a\nu1,1,2\n", {}),
    ("empty header name", "p.csv", b"id,,a\nu1,1,2\n", {}),
    ("three fields", "p.csv", b"id,a\nu1,1\nu2,2,3\n", {}),
    ("non-numeric feature", "p.csv", b"id,a,b\nu1,1,2\nu2,3,abc\n", {}),
    ("empty feature", "p.csv", b"id,a\nu1,\n", {}),
    ("non-numeric label", "p.csv", b"id,y,a\nu1,cat,1\n", {"label_column": "y"}),
    *[(f"feature {v}", "p.csv", f"id,a\nu1,1\nu2,{v}\n".encode(), {}) for v in ("nan", "inf", "-Infinity", "1e40")],
    ("nan label", "p.csv", b"id,y\nu1,NaN\n", {"label_column": "y"}),
    ("empty id", "p.csv", b"id,a\nu1,1\n,2\n", {}),
    ("blank id", "p.csv", b"id,a\nu1,1\n  ,2\n", {}),
    ("id with line break", "p.csv", b'id,a\n"u\n1",1\n', {}),
    ("repeated ids", "p.csv", b"id,x\n" + b"".join(f"{i},{n}\n".encode() for n, i in enumerate("aabbbccdde")), {}),
    ("latin-1", "latin.csv", "id,a\nJosé,1\n".encode("latin-1"), {}),
    ("field over the csv limit", "p.csv", b"id,a\n" + b"u" * 200_000 + b",1\n", {}),
    ("nul in id", "p.csv", b"id,a\na\x00,1\n", {}),
    # edges: line ends, quoting, numbers Python and Arrow read differently, precedence of errors
    ("crlf", "p.csv", b"id,a\r\nu1,1\r\n\r\nu2,2\r\n", {}),
    ("lone cr", "p.csv", b"id,a\ru1,1\r\ru2,2\r", {}),
    ("no final line end", "p.csv", b"id,a\nu1,1\nu2,2", {}),
    ("blank lines before the header", "p.csv", b"\n\n\nid,a\nu1,1\n", {}),
    ("quoted cells", "p.csv", b'"id","a"\n"u,1","1.5"\n"u""2",2\n', {}),
    ("padded numbers", "p.csv", b"id,a,b\nu1, 1.5 ,\t2\n", {}),
    ("underscored number", "p.csv", b"id,a\nu1,1_000\n", {}),
    ("arabic-indic digit", "p.csv", "id,a\nu1,\u0661\n".encode(), {}),
    ("nbsp around a number", "p.csv", "id,a\nu1,\u00a01\n".encode(), {}),
    ("nan with payload", "p.csv", b"id,a\nu1,nan(1)\n", {}),
    ("plus signs and exponents", "p.csv", b"id,a,b\nu1,+1.5,1E+05\nu2,-.5e1,1e-46\n", {}),
    (
        "more digits than a double",
        "p.csv",
        b"id,a\nu1,0.1000000000000000055511151231257827021181583404541015625001\n",
        {},
    ),
    ("float32 edge", "p.csv", b"id,a\nu1,3.4028235e38\nu2,3.4028236e38\n", {}),
    ("tab id", "p.csv", b"id,a\n\t,1\n", {}),
    ("ideographic space id", "p.csv", "id,a\n\u3000,1\n".encode(), {}),
    ("del in id", "p.csv", b"id,a\nu\x7f,1\n", {}),
    ("cr in id", "p.csv", b'id,a\n"u\r",1\n', {}),
    ("whitespace line, one column", "p.csv", b"id\nu1\n   \n", {}),
    ("whitespace line", "p.csv", b"id,a\nu1,1\n   \n", {}),
    ("unterminated quote", "p.csv", b'id,a\nu1,1\n"u2,2\n', {}),
    ("quote after a quoted cell", "p.csv", b'id,a\n"u"1,1\n', {}),
    ("line break in a text column", "p.csv", b'id,a,note\nu1,1,"two\nlines"\nu2,2,x\n', {"feature_columns": ["a"]}),
    ("bad cell in a dropped row", "p.csv", b"id,a\nu1,1\nu1,abc\n", {}),
    ("repeats, then a bad cell", "p.csv", b"id,a\nu1,1\nu1,2\nu2,abc\n", {}),
    ("id error beats a field count", "p.csv", b"id,a\n,1\nu2,2,3\n", {}),
    ("field count beats a missing column", "p.csv", b"key,a\nu1,1\nu2,2,3\n", {}),
    ("header error beats a field count", "p.csv", b"id,id\nu1\n", {}),
    ("non-finite feature beats a label non-number", "p.csv", b"id,y,a\nu1,cat,1\nu2,1,inf\n", {"label_column": "y"}),
    ("feature non-number beats an earlier non-finite", "p.csv", b"id,a\nu1,inf\nu2,x\n", {}),
    ("label nan beats nothing", "p.csv", b"id,y,a\nu1,1,1\nu2,nan,2\n", {"label_column": "y"}),
    ("bad utf-8 far down", "p.csv", b"id,a\n" + b"u1,1\n" * 5000 + b"\xff,1\n", {}),
    ("bad utf-8 in a text column", "p.csv", b"id,a,note\nu1,1,\xe9\n", {"feature_columns": ["a"]}),
    ("text column ignored", "p.csv", b"id,a,note\nu1,1,hello\n", {"feature_columns": ["a"]}),
    ("unicode header", "p.csv", "id,größe\nu1,1\n".encode(), {}),
    ("quoted header with a comma", "p.csv", b'id,"a,b"\nu1,1\n', {}),
    ("one column, ids only", "p.csv", b"id\nb\na\nb\n", {}),
]


@pytest.mark.usefixtures("tiny_seams")
class TestInlineFiles:
    @pytest.mark.parametrize(("name", "file", "content", "options"), INLINE, ids=[case[0] for case in INLINE])
    def test_same_table_or_same_message(
        self, tmp_path: Path, name: str, file: str, content: bytes, options: Options
    ) -> None:
        """The new reader gives the old reader's table, warnings and message on each file."""
        path = tmp_path / file
        path.write_bytes(content)
        assert_same(path, options)

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing CSV or Parquet file has the old message."""
        for name in ("nope.csv", "nope.parquet"):
            assert_same(tmp_path / name, {})


def _parquet(tmp_path: Path, name: str, columns: dict[str, pa.Array]) -> Path:
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


PARQUET: list[tuple[str, dict[str, pa.Array], Options]] = [
    (
        "integer ids",
        {"id": pa.array([7, 42, 7]), "a": pa.array([1.5, 2.5, 3.5]), "label": pa.array([0, 1, 0])},
        {"label_column": "label"},
    ),
    ("negative and big ids", {"id": pa.array([-5, 2**62, 0], pa.int64()), "a": pa.array([1.0, 2.0, 3.0])}, {}),
    ("unsigned ids", {"id": pa.array([2**64 - 1, 1], pa.uint64()), "a": pa.array([1.0, 2.0])}, {}),
    ("large_string ids", {"id": pa.array(["b", "a"], pa.large_string()), "a": pa.array([1.0, 2.0])}, {}),
    ("categorical ids", {"id": pa.array(["b", "a", "b"]).dictionary_encode(), "a": pa.array([1.0, 2.0, 3.0])}, {}),
    (
        "float32 columns",
        {"id": pa.array(["a", "b"]), "a": pa.array([0.1, 1e38], pa.float32()), "y": pa.array([0.3, 1.0], pa.float32())},
        {"label_column": "y"},
    ),
    (
        "integer features beyond 2**53",
        {"id": pa.array(["a", "b"]), "a": pa.array([2**53 + 1, 2**62 + 3], pa.int64())},
        {},
    ),
    ("uint8 features", {"id": pa.array(["a", "b"]), "a": pa.array([0, 255], pa.uint8())}, {}),
    ("missing id column", {"key": pa.array(["a"]), "a": pa.array([1.0])}, {}),
    ("null feature", {"id": pa.array(["a", "b"]), "a": pa.array([1.0, None])}, {}),
    ("null id", {"id": pa.array(["a", None]), "a": pa.array([1.0, 2.0])}, {}),
    ("nan feature", {"id": pa.array(["a", "b"]), "a": pa.array([1.0, float("nan")])}, {}),
    ("too large for float32", {"id": pa.array(["a", "b"]), "a": pa.array([1.0, 1e39])}, {}),
    ("text feature", {"id": pa.array(["a", "b"]), "a": pa.array(["1.5", "x"])}, {}),
    ("numeric text feature", {"id": pa.array(["a", "b"]), "a": pa.array(["1.5", " 2"])}, {}),
    ("boolean feature", {"id": pa.array(["a", "b"]), "a": pa.array([True, False])}, {}),
    ("float ids", {"id": pa.array([1.0, 2.5]), "a": pa.array([1.0, 2.0])}, {}),
    ("repeated ids", {"id": pa.array(["a", "b", "a", "c", "b"]), "a": pa.array([1.0, 2.0, 3.0, 4.0, 5.0])}, {}),
    ("empty id", {"id": pa.array(["a", ""]), "a": pa.array([1.0, 2.0])}, {}),
    ("id with a line break", {"id": pa.array(["a", "b\nc"]), "a": pa.array([1.0, 2.0])}, {}),
    ("long id, no csv limit", {"id": pa.array(["u" * 256, "b"]), "a": pa.array([1.0, 2.0])}, {}),
    (
        "text column ignored",
        {"id": pa.array(["a"]), "a": pa.array([1.0]), "note": pa.array(["x\ny"])},
        {"feature_columns": ["a"]},
    ),
]


@pytest.mark.usefixtures("tiny_seams")
class TestParquetFiles:
    @pytest.mark.parametrize(("name", "columns", "options"), PARQUET, ids=[case[0] for case in PARQUET])
    def test_same_table_or_same_message(
        self, tmp_path: Path, name: str, columns: dict[str, pa.Array], options: Options
    ) -> None:
        """The new reader gives the old reader's table, warnings and message on each Parquet file."""
        assert_same(_parquet(tmp_path, "p.parquet", columns), options)

    def test_corrupt_file(self, tmp_path: Path) -> None:
        """Bytes that are not Parquet get the old message, pyarrow's words included."""
        path = tmp_path / "bad.parquet"
        path.write_bytes(b"not parquet")
        assert assert_same(path, {})[0] == "error"

    def test_truncated_file(self, tmp_path: Path) -> None:
        """A Parquet file cut short gets the old message."""
        path = _parquet(tmp_path, "cut.parquet", {"id": pa.array(["a", "b"]), "a": pa.array([1.0, 2.0])})
        path.write_bytes(path.read_bytes()[:-20])
        assert assert_same(path, {})[0] == "error"


class TestBeyondTheOldReader:
    def test_an_empty_parquet_table_is_a_data_error(self, tmp_path: Path) -> None:
        """A Parquet file with no rows is refused in words; the old reader failed building the table."""
        path = _parquet(tmp_path, "none.parquet", {"id": pa.array([], pa.string()), "a": pa.array([], pa.float64())})
        with pytest.raises(ValueError, match="features have shape"):
            reference_read_party_csv(path)
        with pytest.raises(DataError, match=r"none\.parquet: no data rows; the party needs at least one row"):
            read_party_csv(path)
