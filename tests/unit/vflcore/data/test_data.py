"""Tests for vflcore.data.tables: reading a party's CSV, row alignment and the ID-set digest."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import structlog

from vflcore.data.tables import (
    DataError,
    PartyTable,
    align_rows,
    ids_digest,
    read_party_csv,
    select_rows,
    write_aligned_ids,
)


def write(tmp_path: Path, text: str, name: str = "party.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


class TestReadPartyCsv:
    def test_reads_ids_features_and_labels(self, tmp_path: Path) -> None:
        """IDs stay strings as written (StringDType: no object per row), features float32, labels float64."""
        path = write(tmp_path, "id,label,a,b\n007,1,0.5,2\nx9,0,1.5,-3e2\n")
        table = read_party_csv(path, label_column="label")
        assert table.ids.dtype == np.dtypes.StringDType()
        assert table.ids.tolist() == ["007", "x9"]
        assert table.features.dtype == np.float32
        np.testing.assert_array_equal(table.features, [[0.5, 2.0], [1.5, -300.0]])
        assert table.feature_names == ("a", "b")
        assert table.labels is not None and table.labels.dtype == np.float64
        assert table.labels.tolist() == [1.0, 0.0]
        assert table.source == path
        assert table.num_rows == 2

    def test_label_column_only_gives_zero_features(self, tmp_path: Path) -> None:
        """A label-only active party gets a (n, 0) feature array."""
        table = read_party_csv(write(tmp_path, "id,label\na,1\nb,2\n"), label_column="label")
        assert table.features.shape == (2, 0)
        assert table.feature_names == ()

    def test_without_label_column_every_other_column_is_a_feature(self, tmp_path: Path) -> None:
        """A passive party's features are all columns but the ID, and it has no labels."""
        table = read_party_csv(write(tmp_path, "a,id,b\n1,u1,2\n"))
        assert table.feature_names == ("a", "b")
        assert table.labels is None

    def test_feature_columns_select_and_order(self, tmp_path: Path) -> None:
        """Explicit feature columns are read in the order given, ignoring other columns."""
        table = read_party_csv(write(tmp_path, "id,a,b,c\nu1,1,2,3\n"), feature_columns=["c", "a"])
        assert table.feature_names == ("c", "a")
        np.testing.assert_array_equal(table.features, [[3.0, 1.0]])

    def test_custom_id_column_and_bom_and_blank_lines(self, tmp_path: Path) -> None:
        """A byte-order mark, padded header names and blank lines do not break reading."""
        path = tmp_path / "bom.csv"
        path.write_bytes("\ufeffuser , a\n\nu1,1\n\nu2,2\n".encode())
        table = read_party_csv(path, id_column="user")
        assert table.ids.tolist() == ["u1", "u2"]

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is named in the error."""
        path = tmp_path / "nope.csv"
        with pytest.raises(DataError, match=r"nope\.csv: file not found"):
            read_party_csv(path)

    def test_empty_file(self, tmp_path: Path) -> None:
        """An empty file is reported as needing a header."""
        with pytest.raises(DataError, match=r"empty\.csv: file is empty.*header"):
            read_party_csv(write(tmp_path, "", "empty.csv"))

    def test_header_without_rows(self, tmp_path: Path) -> None:
        """A header with no data rows is rejected."""
        with pytest.raises(DataError, match=r"hdr\.csv: header found but no data rows"):
            read_party_csv(write(tmp_path, "id,a\n", "hdr.csv"))

    def test_missing_id_column_lists_columns_found(self, tmp_path: Path) -> None:
        """The error names the file, the wanted column and the columns that were found."""
        with pytest.raises(DataError, match=r"p\.csv: ID column 'id' not found; columns found: \['key', 'a'\]"):
            read_party_csv(write(tmp_path, "key,a\nu1,1\n", "p.csv"))

    def test_missing_label_column(self, tmp_path: Path) -> None:
        """A configured label column that is absent is named with the file."""
        with pytest.raises(DataError, match=r"p\.csv: label column 'y' not found"):
            read_party_csv(write(tmp_path, "id,a\nu1,1\n", "p.csv"), label_column="y")

    def test_missing_feature_column(self, tmp_path: Path) -> None:
        """A configured feature column that is absent is named with the file."""
        with pytest.raises(DataError, match=r"p\.csv: feature columns \['z'\] not found"):
            read_party_csv(write(tmp_path, "id,a\nu1,1\n", "p.csv"), feature_columns=["a", "z"])

    def test_feature_column_that_is_the_label(self, tmp_path: Path) -> None:
        """Listing the label as a feature would leak it, so it is refused."""
        with pytest.raises(DataError, match=r"p\.csv: columns \['y'\] are listed as features"):
            read_party_csv(write(tmp_path, "id,y\nu1,1\n", "p.csv"), label_column="y", feature_columns=["y"])

    def test_feature_column_listed_twice(self, tmp_path: Path) -> None:
        """A feature listed twice is refused."""
        with pytest.raises(DataError, match=r"p\.csv: feature columns \['a'\] are listed more than once"):
            read_party_csv(write(tmp_path, "id,a\nu1,1\n", "p.csv"), feature_columns=["a", "a"])

    def test_repeated_header_name(self, tmp_path: Path) -> None:
        """Two columns with one name make lookups ambiguous and are refused."""
        with pytest.raises(DataError, match=r"p\.csv: column names appear more than once: \['a'\]"):
            read_party_csv(write(tmp_path, "id,a,a\nu1,1,2\n", "p.csv"))

    def test_empty_header_name(self, tmp_path: Path) -> None:
        """An unnamed column is refused."""
        with pytest.raises(DataError, match=r"p\.csv: the header has an empty column name"):
            read_party_csv(write(tmp_path, "id,,a\nu1,1,2\n", "p.csv"))

    def test_wrong_field_count_names_line(self, tmp_path: Path) -> None:
        """A row with too many fields is reported with its line number."""
        with pytest.raises(DataError, match=r"p\.csv: line 3 has 3 fields but the header has 2"):
            read_party_csv(write(tmp_path, "id,a\nu1,1\nu2,2,3\n", "p.csv"))

    def test_non_numeric_feature_names_line_and_column(self, tmp_path: Path) -> None:
        """A non-numeric feature value is reported with file, line, column and value."""
        with pytest.raises(DataError, match=r"p\.csv: line 3, column 'b': value 'abc' is not a number"):
            read_party_csv(write(tmp_path, "id,a,b\nu1,1,2\nu2,3,abc\n", "p.csv"))

    def test_empty_feature_value(self, tmp_path: Path) -> None:
        """An empty feature cell is reported as an empty value with its line and column."""
        with pytest.raises(DataError, match=r"p\.csv: line 2, column 'a': empty value"):
            read_party_csv(write(tmp_path, "id,a\nu1,\n", "p.csv"))

    def test_non_numeric_label(self, tmp_path: Path) -> None:
        """A non-numeric label is reported with the label column's name."""
        with pytest.raises(DataError, match=r"p\.csv: line 2, column 'y': value 'cat' is not a number"):
            read_party_csv(write(tmp_path, "id,y,a\nu1,cat,1\n", "p.csv"), label_column="y")

    @pytest.mark.parametrize("value", ["nan", "inf", "-Infinity", "1e40"])
    def test_non_finite_feature(self, tmp_path: Path, value: str) -> None:
        """NaN, infinities and values beyond float32 range are refused with their location."""
        with pytest.raises(DataError, match=rf"p\.csv: line 3, column 'a': value '{value}' is not a finite"):
            read_party_csv(write(tmp_path, f"id,a\nu1,1\nu2,{value}\n", "p.csv"))

    def test_non_finite_label(self, tmp_path: Path) -> None:
        """A NaN label is refused."""
        with pytest.raises(DataError, match=r"p\.csv: line 2, column 'y': value 'NaN' is not a finite"):
            read_party_csv(write(tmp_path, "id,y\nu1,NaN\n", "p.csv"), label_column="y")

    @pytest.mark.parametrize("value", ["", "  "])
    def test_empty_id(self, tmp_path: Path, value: str) -> None:
        """A blank ID is reported with its line and the ID column."""
        with pytest.raises(DataError, match=r"p\.csv: line 3, column 'id': empty ID"):
            read_party_csv(write(tmp_path, f"id,a\nu1,1\n{value},2\n", "p.csv"))

    def test_id_with_line_break(self, tmp_path: Path) -> None:
        """A quoted ID spanning lines would break the digest's framing, so it is refused."""
        with pytest.raises(DataError, match=r"p\.csv: line 3, column 'id': the ID contains a line break"):
            read_party_csv(write(tmp_path, 'id,a\n"u\n1",1\n', "p.csv"))

    def test_duplicate_ids_keep_first_row_with_a_counted_warning(self, tmp_path: Path) -> None:
        """Repeated IDs keep their first row; the warning counts them and gives the first three dropped lines, no ID."""
        rows = "".join(f"{i},{n}\n" for n, i in enumerate(["a", "a", "b", "b", "b", "c", "c", "d", "d", "e"]))
        with structlog.testing.capture_logs() as logs:
            table = read_party_csv(write(tmp_path, "id,x\n" + rows, "p.csv"))
        assert table.ids.tolist() == ["a", "b", "c", "d", "e"]
        assert table.features[:, 0].tolist() == [0, 2, 5, 7, 9]
        (warning,) = [e for e in logs if e["event"] == "duplicate_ids_dropped"]
        assert warning["duplicated_ids"] == 4 and warning["rows_dropped"] == 5
        assert warning["first_dropped_lines"] == [3, 5, 6] and warning["file"].endswith("p.csv")
        assert not {"a", "b", "c", "d", "e"} & {str(v) for v in warning.values()}

    def test_not_utf8(self, tmp_path: Path) -> None:
        """A file in another encoding is reported with advice to re-save it as UTF-8."""
        path = tmp_path / "latin.csv"
        path.write_bytes("id,a\nJosé,1\n".encode("latin-1"))
        with pytest.raises(DataError, match=r"latin\.csv: not UTF-8 text.*re-save"):
            read_party_csv(path)

    def test_malformed_csv(self, tmp_path: Path) -> None:
        """A CSV-level parse error (here a field over the csv module's size limit) names the file."""
        path = write(tmp_path, "id,a\n" + "u" * 200_000 + ",1\n", "p.csv")
        with pytest.raises(DataError, match=r"p\.csv: malformed CSV"):
            read_party_csv(path)

    def test_data_error_is_a_value_error(self) -> None:
        """Callers that catch ValueError also catch DataError."""
        assert issubclass(DataError, ValueError)


class TestPartyTable:
    def test_shape_mismatch_rejected(self, tmp_path: Path) -> None:
        """A table whose arrays disagree on row count cannot be built."""
        with pytest.raises(ValueError, match="features have shape"):
            PartyTable(
                ids=np.array(["a"], dtype=object),
                features=np.zeros((2, 1), dtype=np.float32),
                feature_names=("x",),
                labels=None,
                source=tmp_path,
            )

    def test_label_length_mismatch_rejected(self, tmp_path: Path) -> None:
        """Labels must have one entry per ID."""
        with pytest.raises(ValueError, match="labels have shape"):
            PartyTable(
                ids=np.array(["a"], dtype=object),
                features=np.zeros((1, 0), dtype=np.float32),
                feature_names=(),
                labels=np.zeros(2),
                source=tmp_path,
            )


class TestAlignRows:
    def test_sorts_rows_by_id_string_order(self, tmp_path: Path) -> None:
        """Rows, features and labels move together into ID string order."""
        path = write(tmp_path, "id,label,a\nu10,1,10\nu2,2,2\nu1,3,1\n")
        table = align_rows(read_party_csv(path, label_column="label"))
        assert table.ids.tolist() == ["u1", "u10", "u2"]
        np.testing.assert_array_equal(table.features[:, 0], [1.0, 10.0, 2.0])
        assert table.labels is not None and table.labels.tolist() == [3.0, 1.0, 2.0]
        assert table.feature_names == ("a",)

    def test_two_parties_get_the_same_order(self, tmp_path: Path) -> None:
        """Parties with the same IDs in different file orders agree on row order after alignment."""
        one = align_rows(read_party_csv(write(tmp_path, "id,a\nb,1\nc,2\na,3\n", "1.csv")))
        two = align_rows(read_party_csv(write(tmp_path, "id,z\na,9\nc,8\nb,7\n", "2.csv")))
        assert one.ids.tolist() == two.ids.tolist() == ["a", "b", "c"]

    def test_label_free_table(self, tmp_path: Path) -> None:
        """A passive party's table without labels aligns too."""
        table = align_rows(read_party_csv(write(tmp_path, "id,a\nb,1\na,2\n")))
        assert table.labels is None
        assert table.ids.tolist() == ["a", "b"]


class TestSelectRows:
    def test_rows_come_in_the_aligned_order(self, tmp_path: Path) -> None:
        """The rows of the given IDs, in the order given."""
        table = select_rows(read_party_csv(write(tmp_path, "id,a\nb,1\nc,2\na,3\n")), np.array(["c", "a"]))
        assert table.ids.tolist() == ["c", "a"]
        np.testing.assert_array_equal(table.features[:, 0], [2.0, 3.0])

    def test_an_unknown_id_is_counted_not_quoted(self, tmp_path: Path) -> None:
        """An aligned ID missing from the table is refused; the message counts such IDs and never names one."""
        table = read_party_csv(write(tmp_path, "id,a\nrow-17,1\nrow-18,2\n"))
        with pytest.raises(DataError, match="1 of the 2 aligned IDs are not in this table") as caught:
            select_rows(table, np.array(["row-18", "row-99"]))
        assert "row-99" not in str(caught.value) and "row-18" not in str(caught.value)


class TestIdsDigest:
    def test_matches_sorted_newline_framing(self) -> None:
        """The digest is SHA-256 over sorted UTF-8 IDs, each followed by a newline."""
        ids = np.array(["b", "é", "a"], dtype=object)
        expected = hashlib.sha256("a\nb\né\n".encode()).digest()
        assert ids_digest(ids) == expected

    def test_order_independent_and_set_sensitive(self) -> None:
        """Same IDs in any order give one digest; a different ID set gives another."""
        first = ids_digest(np.array(["x", "y", "z"], dtype=object))
        assert first == ids_digest(np.array(["z", "x", "y"], dtype=object))
        assert first != ids_digest(np.array(["x", "y", "w"], dtype=object))
        assert first != ids_digest(np.array(["xy", "z"], dtype=object))


class TestControlCharacters:
    def test_id_with_nul_is_refused(self, tmp_path: Path) -> None:
        """An ID with a NUL (or other control character) is refused, naming line and column."""
        with pytest.raises(DataError, match=r"p\.csv: line 2, column 'id': the ID contains a control character"):
            read_party_csv(write(tmp_path, "id,a\na\x00,1\n", "p.csv"))


class TestParquet:
    def test_integer_ids_become_decimal_strings(self, tmp_path: Path) -> None:
        """A Parquet table with an int64 ID column reads like the CSV that writes the same IDs."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "p.parquet"
        pq.write_table(pa.table({"id": [7, 42, 7], "a": [1.5, 2.5, 3.5], "label": [0, 1, 0]}), path)
        table = read_party_csv(path, label_column="label")
        csv_table = read_party_csv(write(tmp_path, "id,a,label\n7,1.5,0\n42,2.5,1\n", "p.csv"), label_column="label")
        assert table.ids.tolist() == ["7", "42"] == csv_table.ids.tolist()
        assert table.features.tolist() == csv_table.features.tolist()
        assert table.labels is not None and table.labels.tolist() == [0.0, 1.0]

    def test_missing_id_column_names_file_and_column(self, tmp_path: Path) -> None:
        """A Parquet file without the ID column is refused like a CSV would be."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "q.parquet"
        pq.write_table(pa.table({"key": ["a"], "a": [1.0]}), path)
        with pytest.raises(DataError, match=r"q\.parquet.*'id'"):
            read_party_csv(path)

    def test_corrupt_file_is_named(self, tmp_path: Path) -> None:
        """Bytes that are not Parquet give a DataError naming the file."""
        path = tmp_path / "bad.parquet"
        path.write_bytes(b"not parquet")
        with pytest.raises(DataError, match=r"bad\.parquet: not a readable Parquet file"):
            read_party_csv(path)


class TestAlignedIdsFile:
    def test_owner_alone_may_read_it_whatever_the_umask(self, tmp_path: Path) -> None:
        """aligned_ids.csv names every party's common customers: 0600, also over an older 0644 file."""
        old = os.umask(0o022)
        try:
            stale = tmp_path / "aligned_ids.csv"
            stale.write_text("id\nold\n")
            stale.chmod(0o644)
            path = write_aligned_ids(tmp_path, np.array(["b", "a"]))
        finally:
            os.umask(old)
        assert path == stale and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text().splitlines() == ["id", "b", "a"]
