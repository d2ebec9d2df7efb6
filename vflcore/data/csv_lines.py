"""Line numbers found in a CSV's bytes: its data rows (the columnar reader's warnings), its first non-UTF-8 byte.

Arrow reports rows, not lines. A row's line differs from its position by the header, by blank
lines (skipped) and by any line before the header. A quoted value with a line break would shift
lines too, but the columnar reader hands a file with one to the exact scan, so here every data
row is one non-blank line after the first non-blank line (the header). Lines end at ``\\n``,
``\\r\\n`` or a lone ``\\r``, and a leading byte-order mark is no content: the lines Python's csv
module counts in ``reader.line_num``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

_CHUNK_BYTES = 64 << 20
_BOM = b"\xef\xbb\xbf"
_LF, _CR = 10, 13


def data_row_lines(path: Path, rows: np.ndarray) -> list[int]:
    """The 1-based line numbers of the data rows at 0-based positions ``rows`` (ascending).

    Reads the file in chunks up to the last row asked for, with numpy: seconds for gigabytes,
    where Python's csv module would take minutes.
    """
    wanted = np.asarray(rows, dtype=np.int64) + 2  # 1-based among non-blank lines; the header is the first
    found: list[int] = []
    lines_before = 0  # lines completed in earlier chunks
    non_blank_before = 0
    open_line_has_content = False  # the line a chunk boundary cut has bytes already
    with path.open("rb") as handle:
        head = handle.read(len(_BOM))
        chunk = (b"" if head == _BOM else head) + handle.read(_CHUNK_BYTES)
        while chunk and len(found) < len(wanted):
            if chunk.endswith(b"\r"):
                chunk += handle.read(1)  # so a \r\n split by the boundary stays one line end
            data = np.frombuffer(chunk, dtype=np.uint8)
            ends = _line_ends(data)
            starts = np.concatenate(([0], ends[:-1] + 1))
            content_ends = ends - ((data[ends] == _LF) & (ends > starts) & (data[np.maximum(ends - 1, 0)] == _CR))
            non_blank = content_ends > starts
            if len(non_blank):
                non_blank[0] |= open_line_has_content
            numbers = lines_before + 1 + np.flatnonzero(non_blank)
            ranks = non_blank_before + np.arange(1, len(numbers) + 1)
            here = wanted[(wanted > non_blank_before) & (wanted <= non_blank_before + len(numbers))]
            found.extend(numbers[np.searchsorted(ranks, here)].tolist())
            lines_before += len(ends)
            non_blank_before += len(numbers)
            tail = len(data) - (int(ends[-1]) + 1 if len(ends) else 0)
            open_line_has_content = tail > 0 or (open_line_has_content and not len(ends))
            chunk = handle.read(_CHUNK_BYTES)
    if len(found) < len(wanted) and open_line_has_content and non_blank_before + 1 in wanted:
        found.append(lines_before + 1)  # the last line, which has no line end
    return found


def _line_ends(data: np.ndarray) -> np.ndarray:
    """Positions of line ends: every \\n, and every \\r not followed by \\n."""
    newline = data == _LF
    lone_cr = data == _CR
    lone_cr[:-1] &= ~newline[1:]
    return np.flatnonzero(newline | lone_cr)


def first_undecodable_line(path: Path) -> int | None:
    """The 1-based line of the file's first byte that is not UTF-8, counted as ``data_row_lines`` counts lines.

    None if every byte decodes (the caller met an error elsewhere). Chunks are cut after a line
    feed, so no character is split between two of them.
    """
    lines_before = 0
    with path.open("rb") as handle:
        rest = b""
        while True:
            block = handle.read(_CHUNK_BYTES)
            data = rest + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            if block and cut == 0:
                rest = data
                continue
            piece, rest = data[:cut], data[cut:]
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError as exc:
                return lines_before + 1 + len(_line_ends(np.frombuffer(piece[: exc.start], dtype=np.uint8)))
            if not block:
                return None
            ends = _line_ends(np.frombuffer(piece, dtype=np.uint8))
            lines_before += len(ends)
