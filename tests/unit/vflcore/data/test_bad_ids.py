"""IDs a party's table may not hold: each refused with the file and its line (CSV) or row (Parquet).

The rule (docs/reference/ids.md): an ID is UTF-8 text of 1 to 256 bytes, not whitespace alone, with no
control character. Every other ID is read as written: 256 bytes exactly, bytes stored in a
Parquet column without the UTF8 annotation. And a long ID costs the reader no more than its
own bytes: the NUL-padded copies it hashes and decodes are made a slice at a time.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vflcore.data import id_arrays
from vflcore.data.csv_lines import first_undecodable_line
from vflcore.data.id_arrays import MAX_ID_BYTES, find_repeats, string_column
from vflcore.data.tables import DataError, read_party_csv

#: 129 two-byte characters: 129 characters, 258 bytes. The limit counts bytes.
LONG_BY_BYTES = "é" * 129


def _csv(tmp_path: Path, body: bytes) -> Path:
    path = tmp_path / "party.csv"
    path.write_bytes(b"id,a\n" + body)
    return path


def _parquet(tmp_path: Path, ids: pa.Array) -> Path:
    path = tmp_path / "party.parquet"
    pq.write_table(pa.table({"id": ids, "a": pa.array(np.arange(len(ids), dtype=np.float64))}), path)
    return path


def _not_utf8(values: list[bytes]) -> pa.Array:
    """A Parquet string column holding bytes that are not UTF-8 (a writer that did not check them)."""
    binary = pa.array(values, pa.binary())
    return pa.StringArray.from_buffers(len(values), binary.buffers()[1], binary.buffers()[2])


class TestCsv:
    @pytest.mark.parametrize("cell", [b'""', b"   "], ids=["empty", "spaces only"])
    def test_an_empty_id_names_its_line(self, tmp_path: Path, cell: bytes) -> None:
        path = _csv(tmp_path, b"u1,1\n" + cell + b",2\n")
        with pytest.raises(DataError, match=rf"{path}: line 3, column 'id': empty ID"):
            read_party_csv(path)

    @pytest.mark.parametrize("long_id", ["u" * (MAX_ID_BYTES + 1), LONG_BY_BYTES], ids=["ascii", "two-byte"])
    def test_an_id_over_the_limit_names_its_line_and_size(self, tmp_path: Path, long_id: str) -> None:
        size = len(long_id.encode())
        path = _csv(tmp_path, b"u1,1\n\nu2,2\n" + long_id.encode() + b",3\n")
        with pytest.raises(DataError, match=rf"{path}: line 5, column 'id': the ID is {size} bytes of UTF-8, over"):
            read_party_csv(path)

    def test_an_id_of_exactly_the_limit_is_read_as_written(self, tmp_path: Path) -> None:
        longest = "é" * 127 + "xy"  # 256 bytes
        path = _csv(tmp_path, f'"{longest}",1\n" a, ""b"" ",2\n'.encode())
        assert read_party_csv(path).ids.tolist() == [longest, ' a, "b" ']

    def test_bytes_that_are_not_utf8_name_their_line(self, tmp_path: Path) -> None:
        path = _csv(tmp_path, b"u1,1\r\nu2,2\r\r\nu\xe9,3\n")
        with pytest.raises(DataError, match=rf"{path}: not UTF-8 text at line 5 \(.*\); re-save the file as UTF-8"):
            read_party_csv(path)

    def test_the_line_of_a_bad_byte_across_chunks(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Chunks of a few bytes: lines split by a chunk, and a line longer than one, are counted once."""
        from vflcore.data import csv_lines

        monkeypatch.setattr(csv_lines, "_CHUNK_BYTES", 3)
        path = _csv(tmp_path, b"a-long-first-id,1\r\n" * 4 + "ü,2\n".encode() + b"\xff,3\n")
        assert first_undecodable_line(path) == 7
        path.write_bytes(b"id\nfine\n")
        assert first_undecodable_line(path) is None


class TestParquet:
    def test_an_empty_id_names_its_row(self, tmp_path: Path) -> None:
        path = _parquet(tmp_path, pa.array(["u1", "u2", ""]))
        with pytest.raises(DataError, match=rf"{path}: row 3, column 'id': empty ID"):
            read_party_csv(path)

    def test_an_id_over_the_limit_names_its_row(self, tmp_path: Path) -> None:
        path = _parquet(tmp_path, pa.array(["u1", LONG_BY_BYTES]))
        with pytest.raises(DataError, match=rf"{path}: row 2, column 'id': the ID is 258 bytes of UTF-8"):
            read_party_csv(path)

    @pytest.mark.parametrize("kind", ["string", "binary"])
    def test_bytes_that_are_not_utf8_name_their_row(self, tmp_path: Path, kind: str) -> None:
        values = [b"u1", b"u2", b"caf\xe9"]
        ids = _not_utf8(values) if kind == "string" else pa.array(values, pa.binary())
        path = _parquet(tmp_path, ids)
        with pytest.raises(DataError, match=rf"{path}: row 3, column 'id': the ID is not UTF-8 text"):
            read_party_csv(path)

    def test_ids_stored_as_bytes_are_read_as_their_text(self, tmp_path: Path) -> None:
        """A BYTE_ARRAY column without the UTF8 annotation holds text too; it is not read as "b'...'"."""
        ids = ["cust-0001@bank.example", "ВИНО-12-ünïcødé", "0042"]
        path = _parquet(tmp_path, pa.array([value.encode() for value in ids], pa.binary()))
        assert read_party_csv(path).ids.tolist() == ids


class TestLongIdsCostTheirBytes:
    def test_one_long_id_does_not_widen_every_row(self) -> None:
        """Hashing and decoding 300,000 IDs, one of them 256 bytes, holds one padded slice, not 300,000.

        The padded copy of every row would be 77 MB; a slice is at most 16 MiB. numpy's arrays are
        traced by tracemalloc (Arrow's are not, and are the same either way).
        """
        ids = pa.array([f"u{i}" for i in range(300_000 - 1)] + ["x" * MAX_ID_BYTES], pa.large_string())
        tracemalloc.start()
        try:
            assert find_repeats(ids) is None
            column = string_column(ids)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert column[-1] == "x" * MAX_ID_BYTES and column[7] == "u7"
        assert peak < 40 << 20, f"peak {peak / 2**20:.0f} MiB"

    def test_hashes_do_not_depend_on_the_padding(self) -> None:
        """Slices padded to different widths hash each ID alike, so a repeat across slices is found."""
        narrow = id_arrays.hashes(id_arrays.padded_utf8(pa.array(["abc", "cust-0001@bank.example"])))
        wide = id_arrays.hashes(id_arrays.padded_utf8(pa.array(["abc", "cust-0001@bank.example", "x" * 200])))
        assert narrow.tolist() == wide[:2].tolist()

    def test_a_repeat_in_another_slice_is_found(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(id_arrays, "_PADDED_ROWS", 2)
        repeats = find_repeats(pa.chunked_array([pa.array(["a", "y" * 100, "b"]), pa.array(["c", "a"])]))
        assert repeats is not None and repeats.dropped.tolist() == [4]
