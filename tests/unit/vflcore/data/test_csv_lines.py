"""Line numbers of a CSV's data rows found in its bytes, against the line numbers Python's csv module counts."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from vflcore.data import csv_lines
from vflcore.data.csv_lines import data_row_lines

TEXTS = {
    "plain": b"id,a\nu1,1\nu2,2\nu3,3\n",
    "blank lines": b"id,a\n\nu1,1\n\n\nu2,2\nu3,3\n\n",
    "blank lines before the header": b"\n\nid,a\nu1,1\n\nu2,2\n",
    "crlf": b"id,a\r\nu1,1\r\n\r\nu2,2\r\nu3,3\r\n",
    "lone cr": b"id,a\ru1,1\r\ru2,2\ru3,3\r",
    "mixed line ends": b"id,a\r\nu1,1\ru2,2\n\r\n\ru3,3\r\n",
    "no final line end": b"id,a\nu1,1\n\nu2,2",
    "byte-order mark": "\ufeffid,a\nu1,1\nu2,2\n".encode(),
    "byte-order mark, blank first": "\ufeff\nid,a\n\nu1,1\nu2,2\n".encode(),
    "whitespace is content": b"id\nu1\n  \nu2\n",
    "multibyte": "id,a\nZoë,1\n\n東京,2\n🦊,3\n".encode(),
}


def csv_module_lines(path: Path) -> list[int]:
    """What the row-by-row reader reports: ``reader.line_num`` of each non-blank row after the header."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        next(row for row in reader if row)
        return [reader.line_num for row in reader if row]


class TestDataRowLines:
    @pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64 << 20])
    @pytest.mark.parametrize("name", sorted(TEXTS))
    def test_same_lines_as_the_csv_module(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, chunk: int
    ) -> None:
        """Every data row's line, and any subset of rows, match the csv module's count at any chunk size."""
        monkeypatch.setattr(csv_lines, "_CHUNK_BYTES", chunk)
        path = tmp_path / "p.csv"
        path.write_bytes(TEXTS[name])
        expected = csv_module_lines(path)
        assert data_row_lines(path, np.arange(len(expected))) == expected
        assert data_row_lines(path, np.array([len(expected) - 1])) == expected[-1:]
        assert data_row_lines(path, np.array([], dtype=np.int64)) == []

    def test_stops_at_the_last_row_asked_for(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The scan reads no further than the chunk holding the last wanted row."""
        monkeypatch.setattr(csv_lines, "_CHUNK_BYTES", 8)
        path = tmp_path / "p.csv"
        path.write_bytes(b"id\n" + b"".join(f"u{n:04d}\n".encode() for n in range(1000)))
        reads: list[int] = []
        real_open = Path.open

        def counting_open(self: Path, *args: object, **kwargs: object) -> object:
            handle = real_open(self, *args, **kwargs)  # type: ignore[call-overload]
            read = handle.read

            def counted(size: int = -1) -> bytes:
                reads.append(size)
                data: bytes = read(size)
                return data

            handle.read = counted
            return handle

        monkeypatch.setattr(Path, "open", counting_open)
        assert data_row_lines(path, np.array([0, 2])) == [2, 4]
        assert sum(size for size in reads if size > 1) < 8 * 5
