"""Whole-column operations on sample IDs, with no Python object per ID.

A party's IDs live in ``PartyTable.ids`` as numpy's variable-width UTF-8 strings
(``StringDType``): 16 bytes a row for IDs of up to 15 bytes, and no Python object per row, where
an object array of ``str`` costs about 60 bytes and an allocation per row. What numpy cannot do
on such an array without a Python object per row (UTF-8 encoding, hashing, hash joins) is done
on an Arrow string array, which holds the same UTF-8 bytes in one buffer.

Every ID reaching these functions has passed the reader's checks: valid UTF-8 of 1 to
``MAX_ID_BYTES`` bytes with no control character, so a NUL can pad an ID to a fixed width without
changing it. A padded copy is as wide as the longest ID in it, so it is only ever made a slice of
``_PADDED_ROWS`` rows at a time: one 256-byte ID among 10M short ones would otherwise make the
whole copy 2.6 GB.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from hashlib import _Hash

#: The dtype of ``PartyTable.ids``.
STRING_IDS = np.dtypes.StringDType()

#: The longest ID a party's table may hold, in bytes of UTF-8 (docs/reference/ids.md): the readers refuse longer ones.
MAX_ID_BYTES = 256

#: Rows per slice where a whole-column operation would otherwise hold a second copy of every ID.
_SLICE_ROWS = 1 << 20
#: Rows per NUL-padded slice: at most 16 MiB however long the longest ID (65,536 x 256 bytes).
_PADDED_ROWS = 1 << 16

_LARGE = pa.large_string()
_NEWLINE = pa.scalar("\n", _LARGE)
_CRLF = pa.scalar("\r\n", _LARGE)
_QUOTE = pa.scalar('"', _LARGE)
_NOTHING = pa.scalar("", _LARGE)


def arrow_ids(ids: np.ndarray) -> pa.Array:
    """The IDs as one Arrow ``large_string`` array; any other element becomes its ``str``, as before."""
    ids = np.asarray(ids)
    if ids.dtype.kind != "T":
        ids = ids.astype(STRING_IDS)
    try:
        return pa.array(ids, type=_LARGE)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError):  # a pyarrow older than StringDType
        return pa.array(fixed_width(ids), type=_LARGE)


def fixed_width(ids: np.ndarray) -> np.ndarray:
    """The IDs as numpy's fixed-width ``str`` (``<U{longest}``), for code that asks for ``dtype=str``.

    ``np.asarray(ids, dtype=str)`` fails on a StringDType array (numpy cannot pick the width).
    """
    ids = np.asarray(ids)
    if ids.dtype.kind != "T":
        return ids.astype(str)
    width = int(np.strings.str_len(ids).max()) if len(ids) else 1
    return ids.astype(np.dtypes.StrDType(max(width, 1)))


def string_column(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Arrow strings (valid UTF-8, no NUL) as a StringDType array, through NUL-padded UTF-8 a slice at a time.

    numpy decodes the padded bytes in C; the bytes must be valid UTF-8, which Arrow has checked
    (numpy < 2.5 reads past a truncated character, numpy#32288).
    """
    out = np.empty(sum(len(chunk) for chunk in _string_chunks(values)), dtype=STRING_IDS)
    for at, part in _padded_slices(values):
        out[at : at + len(part)] = part.astype(STRING_IDS)
    return out


def _padded_slices(values: pa.Array | pa.ChunkedArray) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, ``padded_utf8`` of ``_PADDED_ROWS`` rows) over every chunk: each slice padded to its own width."""
    at = 0
    for chunk in _string_chunks(values):
        for start in range(0, len(chunk), _PADDED_ROWS):
            part = padded_utf8(chunk.slice(start, _PADDED_ROWS))
            yield at, part
            at += len(part)


def padded_utf8(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each ID's UTF-8 bytes NUL-padded to one width, a multiple of 8 (``S{width}``): rows as words.

    The padding is appended by Arrow (a join with a per-row string of NULs), so the rows are
    copied once, in C.
    """
    chunks = _string_chunks(values)
    lengths = [np.diff(_offsets(chunk)) for chunk in chunks]
    longest = max((int(part.max()) for part in lengths if len(part)), default=0)
    width = max(8, -(-longest // 8) * 8)
    out = np.empty(sum(len(chunk) for chunk in chunks), dtype=f"S{width}")
    at = 0
    for chunk, length in zip(chunks, lengths, strict=True):
        if len(chunk):
            padding = np.zeros(len(chunk) + 1, dtype=np.int64)
            np.cumsum(width - length, out=padding[1:])
            pads = pa.LargeStringArray.from_buffers(
                len(chunk), pa.py_buffer(padding), pa.py_buffer(np.zeros(int(padding[-1]), np.uint8))
            )
            joined = pc.binary_join_element_wise(chunk, pads, _NOTHING)
            start = int(_offsets(joined)[0])
            out[at : at + len(chunk)] = np.frombuffer(_data(joined), dtype=out.dtype, count=len(chunk), offset=start)
        at += len(chunk)
    return out


def utf8_buffers(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(end offsets as int64, every ID's UTF-8 bytes back to back as uint8): the IDs in two flat arrays.

    What a file of IDs keeps (``vflcore.psi.cache``): Arrow encodes 8M IDs in a fraction of a
    second, where numpy's ``strings.encode`` took 2 s.
    """
    chunk = arrow_ids(ids)
    offsets = _offsets(chunk)
    data = _data(chunk)[int(offsets[0]) : int(offsets[-1])]
    return (offsets[1:] - offsets[0]).astype(np.int64), data


def from_utf8_buffers(ends: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``utf8_buffers`` undone: the IDs as a StringDType array."""
    ends = np.asarray(ends, dtype=np.int64)
    if len(ends) and (ends[-1] != len(data) or np.any(np.diff(ends) < 0) or ends[0] < 0):
        raise ValueError("the ID offsets do not fit the ID bytes")
    offsets = np.concatenate([np.zeros(1, dtype=np.int64), ends])
    values = pa.LargeStringArray.from_buffers(
        len(ends), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data, dtype=np.uint8))
    )
    values.validate(full=True)  # UTF-8 checked: the bytes come from a file
    return string_column(values)  # a slice at a time: the padded copy of all 8M held 0.3 GB


def utf8_chunks(values: pa.Array | pa.ChunkedArray) -> Iterator[np.ndarray]:
    """The UTF-8 bytes of the IDs (all of them, no separator), one uint8 array per chunk."""
    for chunk in _string_chunks(values):
        offsets = _offsets(chunk)
        if len(chunk):
            yield _data(chunk)[int(offsets[0]) : int(offsets[-1])]


def hashes(padded: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each padded ID (splitmix64 over its 8-byte words): equal IDs, equal hashes.

    Words of padding alone (all zero) are skipped, so the hash does not depend on the width: slices
    padded to different widths hash alike. An ID's own words are never zero (no NUL in an ID).
    """
    words = padded.view(np.uint64).reshape(len(padded), -1)
    hashed = np.full(len(padded), 0x9E3779B97F4A7C15, dtype=np.uint64)
    for column in range(words.shape[1]):
        word = words[:, column]
        mixed = hashed ^ word
        mixed ^= mixed >> np.uint64(30)
        mixed *= np.uint64(0xBF58476D1CE4E5B9)
        mixed ^= mixed >> np.uint64(27)
        mixed *= np.uint64(0x94D049BB133111EB)
        mixed ^= mixed >> np.uint64(31)
        hashed = np.where(word != 0, mixed, hashed)
    return hashed


def id_hashes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``hashes`` of every ID, padded a slice at a time (``_PADDED_ROWS``): 8 bytes a row held, whatever the widths."""
    out = np.empty(sum(len(chunk) for chunk in _string_chunks(values)), dtype=np.uint64)
    for at, part in _padded_slices(values):
        out[at : at + len(part)] = hashes(part)
    return out


@dataclass(frozen=True)
class Repeats:
    """Rows whose ID an earlier row already has: the table keeps ``keep`` (ascending) and drops ``dropped``."""

    keep: np.ndarray
    dropped: np.ndarray
    #: How many distinct IDs appear on more than one row.
    repeated_ids: int


def find_repeats(values: pa.Array | pa.ChunkedArray) -> Repeats | None:
    """The repeated IDs' rows, or None when every ID is distinct (the common case, decided by hashes).

    Sorting 64-bit hashes settles "all distinct" in a fraction of a second at 10M rows; only when
    two hashes match does Arrow's exact hash table (``dictionary_encode``) find the rows.
    """
    ordered = np.sort(id_hashes(values))
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    combined = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    codes = pc.dictionary_encode(combined).indices.to_numpy().astype(np.int64)
    # Codes are numbered in order of first appearance, so a row is an ID's first exactly when its
    # code exceeds every code before it.
    seen = np.maximum.accumulate(codes)
    first = np.empty(len(codes), dtype=bool)
    first[:1] = True
    first[1:] = codes[1:] > seen[:-1]
    if first.all():
        return None  # two distinct IDs with one hash
    repeated = int((np.bincount(codes) > 1).sum())
    return Repeats(np.flatnonzero(first), np.flatnonzero(~first), repeated)


def positions(table_ids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, int]:
    """(row of each wanted ID in ``table_ids``, how many wanted IDs the table lacks); one hash join.

    The rows are meaningful only when none is missing. ``table_ids`` must be distinct, as a
    table's IDs are after reading.
    """
    found = pc.index_in(arrow_ids(wanted), value_set=arrow_ids(table_ids))
    if found.null_count:
        return np.empty(0, dtype=np.int64), found.null_count
    return found.to_numpy().astype(np.int64), 0


def member_positions(ids: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Positions in ``ids`` whose ID is among ``members`` (repeats allowed), ascending; one hash lookup each."""
    found = pc.is_in(arrow_ids(ids), value_set=arrow_ids(members))
    return np.flatnonzero(found.to_numpy(zero_copy_only=False)).astype(np.int64)


def sorted_positions(sorted_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of ``wanted`` would go in ``sorted_ids`` (strictly increasing): ``bisect_left`` for each.

    ``np.searchsorted`` on a ``StringDType`` array reads out of bounds for strings of 16 bytes or
    more on numpy < 2.5 (numpy#31533): wrong positions and, at worst, a SIGSEGV. Python 3.11's
    newest numpy is 2.4.6, so the search is done here, all queries at once: each round compares
    every open query with its midpoint through ``<``, the comparison that ``sort`` and ``unique``
    use correctly. About 25 rounds at 10M IDs; 1,000 queries in 2M IDs take under 10 ms.
    """
    low = np.zeros(len(wanted), dtype=np.int64)
    high = np.full(len(wanted), len(sorted_ids), dtype=np.int64)
    open_ = np.flatnonzero(low < high)
    while len(open_):
        middle = (low[open_] + high[open_]) // 2
        below = sorted_ids[middle] < wanted[open_]
        low[open_] = np.where(below, middle + 1, low[open_])
        high[open_] = np.where(below, high[open_], middle)
        open_ = open_[low[open_] < high[open_]]
    return low


def sort_order(ids: np.ndarray) -> np.ndarray:
    """The rows of ``ids`` in the IDs' sorted order (their UTF-8 bytes), as uint32 (int64 past 2^32 rows).

    Arrow sorts strings by their UTF-8 bytes, which is the code-point order Python's ``sorted``
    gives ``str`` and numpy gives ``StringDType``. Sorting 10M IDs takes seconds, so a caller
    that needs the order twice (the ID-set digest, then PSI's aligned order) computes it once.
    """
    return _order_of(arrow_ids(ids))


def _order_of(values: pa.Array) -> np.ndarray:
    order: np.ndarray = pc.sort_indices(values).to_numpy()
    return order.astype(np.uint32) if len(order) < 2**32 else order.astype(np.int64)


def ids_digest(ids: np.ndarray) -> bytes:
    """SHA-256 over the sorted IDs, each UTF-8 encoded and followed by a newline.

    The digest is the one every earlier version computed (Python's ``sorted`` gives the same order).
    """
    return digest_and_order(ids)[0]


def digest_and_order(ids: np.ndarray, order: np.ndarray | None = None) -> tuple[bytes, np.ndarray]:
    """(``ids_digest``, ``sort_order``) from one Arrow copy of the IDs: PSI's active party needs both.

    Arrow's allocator keeps what it frees for its next allocation; the copy (0.2 GB at 10M IDs)
    is handed back at the end, so that numpy's and torch's arrays that follow can use it.
    """
    values = arrow_ids(ids)
    rows = _order_of(values) if order is None else order
    digest = hashlib.sha256()
    indices = pa.array(rows)
    for start in range(0, len(values), _SLICE_ROWS):
        _update_lines(digest, values.take(indices.slice(start, _SLICE_ROWS)))
    del values, indices
    pa.default_memory_pool().release_unused()
    return digest.digest(), rows


def aligned_digest(ids: np.ndarray) -> np.ndarray:
    """SHA-256 of an ID list in its order (UTF-8, newline after each), as 32 uint8."""
    values = arrow_ids(ids)
    digest = hashlib.sha256()
    for start in range(0, len(values), _SLICE_ROWS):
        _update_lines(digest, values.slice(start, _SLICE_ROWS))
    return np.frombuffer(digest.digest(), dtype=np.uint8).copy()


def quoted_id_lines(ids: np.ndarray) -> Iterator[memoryview]:
    """The IDs as the rows ``csv.writer`` writes (QUOTE_MINIMAL, ``\\r\\n``), in slices of bytes.

    An ID with a comma, quote or line break is quoted with its quotes doubled; an empty one is
    written ``""``, as ``csv.writer`` writes a lone empty field.
    """
    for start in range(0, len(ids), _SLICE_ROWS):
        values = arrow_ids(ids[start : start + _SLICE_ROWS])
        quoted = pc.binary_join_element_wise(_QUOTE, pc.replace_substring(values, '"', '""'), _QUOTE, _NOTHING)
        needs = pc.or_(pc.match_substring_regex(values, '[,"\r\n]'), pc.equal(pc.binary_length(values), 0))
        rows = pc.binary_join_element_wise(pc.if_else(needs, quoted, values), _CRLF, _NOTHING)
        yield from (part.data for part in utf8_chunks(rows))


def _update_lines(digest: _Hash, values: pa.Array) -> None:
    for part in utf8_chunks(pc.binary_join_element_wise(values, _NEWLINE, _NOTHING)):
        digest.update(part.data)


def _string_chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The chunks as ``large_string`` arrays, so one offset width serves every source type."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    return [chunk if chunk.type == _LARGE else chunk.cast(_LARGE) for chunk in chunks]


def _offsets(chunk: pa.Array) -> np.ndarray:
    buffer = chunk.buffers()[1]
    if buffer is None or len(chunk) == 0:
        return np.zeros(1, dtype=np.int64)
    return np.frombuffer(buffer, dtype=np.int64, count=len(chunk) + 1, offset=chunk.offset * 8)


def _data(chunk: pa.Array) -> np.ndarray:
    buffer = chunk.buffers()[2]
    return np.zeros(0, dtype=np.uint8) if buffer is None else np.frombuffer(buffer, dtype=np.uint8)
