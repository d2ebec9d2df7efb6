"""Matching double-blinded values: which of my items equal which of yours, without the IDs.

After both blindings, equal IDs give equal 32-byte values. Only a prefix is compared
(``MATCH_BYTES``): 12 bytes make a false match between two 10M-item sets about as likely as
10^14 / 2^96 ≈ 10^-15.

One side is held as a ``SortedPoints`` table and the other side is streamed through it chunk by
chunk (``lookup``), so a party holds one sorted array, never both sides. The table keeps each
value as a big-endian uint64 of its first 8 bytes (the sort key: numpy sorts integers far faster
than 12-byte opaque values) and a uint32 of the last 4, plus the value's position: 16 bytes an
item, 160 MB at 10M. Values are pseudorandom, so two of them share their first 8 bytes with a
chance of about n² / 2^65; such ties are still matched exactly (every candidate with the same
8 bytes is compared on all 12), never dropped, as a plain sorted-intersection of prefixes would.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: Bytes of each double-blinded value that are sent and compared.
MATCH_BYTES = 12
_HEAD = 8  # bytes of the sort key


def truncate(values: np.ndarray) -> np.ndarray:
    """The comparable prefix of blinded values given as an (n, 32) uint8 array."""
    return np.ascontiguousarray(values[:, :MATCH_BYTES])


def _check(values: np.ndarray, what: str) -> np.ndarray:
    if values.ndim != 2 or values.shape[1] != MATCH_BYTES:
        raise ValueError(f"blinded values must be (n, {MATCH_BYTES}) bytes, got {values.shape} for {what}")
    if values.dtype != np.uint8:
        raise ValueError(f"blinded values must be uint8, got {values.dtype} for {what}")
    return np.ascontiguousarray(values)


def _split(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first 8 bytes as big-endian uint64, last 4 as big-endian uint32): byte order kept in integer order."""
    head = values[:, :_HEAD].copy().view(">u8").ravel().astype(np.uint64)
    tail = values[:, _HEAD:].copy().view(">u4").ravel().astype(np.uint32)
    return head, tail


class SortedPoints:
    """One side's double-blinded values, sorted for lookup: the one array a matching party holds.

    Build it from chunks in their order (``build``) or from one array; each value's position
    in that order is what ``lookup`` returns for it.
    """

    __slots__ = ("_head", "_position", "_tail")

    def __init__(self, values: np.ndarray) -> None:
        head, tail = _split(_check(values, "the sorted side"))
        self._sort(head, tail)

    @classmethod
    def build(cls, count: int, chunks: Iterable[np.ndarray]) -> SortedPoints:
        """The table of ``count`` values that arrive as successive (c, 12) uint8 chunks.

        Only the two key arrays are filled, chunk by chunk: the (count, 12) array itself never
        exists, so the peak is the table (16 bytes an item) plus the sort's index.
        """
        head = np.empty(count, dtype=np.uint64)
        tail = np.empty(count, dtype=np.uint32)
        filled = 0
        for chunk in chunks:
            part_head, part_tail = _split(_check(chunk, "a chunk of the sorted side"))
            if filled + len(part_head) > count:
                raise ValueError(f"more than the {count} values announced for the sorted side")
            head[filled : filled + len(part_head)] = part_head
            tail[filled : filled + len(part_tail)] = part_tail
            filled += len(part_head)
        if filled != count:
            raise ValueError(f"the sorted side has {filled} values, {count} were announced")
        table = cls.__new__(cls)
        table._sort(head, tail)
        return table

    def _sort(self, head: np.ndarray, tail: np.ndarray) -> None:
        # Any sort will do (values sharing a head are all compared on their tail), and numpy's
        # default one is SIMD-accelerated for 64-bit keys: 0.35 s at 8M where "stable" takes 0.9 s.
        order = np.argsort(head)
        self._head = head[order]
        self._tail = tail[order]
        index_type = np.uint32 if len(order) < 2**32 else np.int64
        self._position = order.astype(index_type)

    def __len__(self) -> int:
        return len(self._head)

    def lookup(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pairs (i, j): ``values[i]`` equals the table's value at position j, i ascending; int64.

        Each side's values are distinct (IDs are deduplicated before blinding, and blinding is a
        bijection), so a value matches at most once. The queries are sorted first: numpy's binary
        search then starts each one where the previous ended, which is several times faster on a
        table far larger than the cache.
        """
        head, tail = _split(_check(values, "the looked-up side"))
        size = len(self._head)
        order = np.argsort(head)
        head, tail = head[order], tail[order]
        left = np.searchsorted(self._head, head, side="left")
        at = np.minimum(left, size - 1) if size else left
        same_head = (left < size) & (self._head[at] == head) if size else np.zeros(len(head), dtype=bool)
        after = np.minimum(left + 1, size - 1) if size else left
        tied = same_head & (left + 1 < size) & (self._head[after] == head) if size else same_head
        single = np.flatnonzero(same_head & ~tied)
        hit = single[self._tail[left[single]] == tail[single]]
        found_i, found_j = [hit], [left[hit]]
        for i in np.flatnonzero(tied).tolist():  # first 8 bytes shared within the table: rare
            right = int(np.searchsorted(self._head, head[i], side="right"))
            candidates = np.arange(left[i], right)
            same = candidates[self._tail[candidates] == tail[i]]
            if len(same):
                found_i.append(np.asarray([i]))
                found_j.append(same[:1])
        i_sorted = np.concatenate(found_i).astype(np.int64)
        j_all = np.concatenate(found_j).astype(np.int64)
        i_all = order[i_sorted].astype(np.int64)
        back = np.argsort(i_all)  # distinct: any sort will do
        return i_all[back], self._position[j_all[back]].astype(np.int64)


def match(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) with ``left[i] == right[j]``; both are (n, MATCH_BYTES) uint8 arrays."""
    _check(left, "the left side")
    return SortedPoints(right).lookup(left)
