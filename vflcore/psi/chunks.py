"""How a PSI exchange cuts an ID set into chunks, and a chunk's IDs and points into what the blinder takes.

Every stream of the exchange (a party's blinded IDs up, the active party's down, the doubly
blinded copies back) moves in chunks of ``size`` items, numbered from 0; the last one may be
shorter. Both ends compute the same cut from the count and the size, so a chunk's number (the
tensor key's batch) is all that travels with it.

The blinder's interface (``hash_and_blind_packed``, ``blind_packed``) takes a sequence of
``bytes``; these helpers build one per chunk, so per-item Python objects live only as long as a
chunk is in flight, never for the whole set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from vflcore.psi.hash_to_curve import U_BYTES
from vflcore.runtime.config import DEFAULT_CHUNK_IDS as DEFAULT_CHUNK_IDS_SETTING

#: Items per chunk when the server's ``[psi] chunk_ids`` is not set (declared with the settings).
DEFAULT_CHUNK_IDS: Final = DEFAULT_CHUNK_IDS_SETTING
#: Chunks a stream computes ahead of the one it sends or stores, on either side: enough to keep
#: the blinder's workers fed while the stream waits on the network or on the peer.
AHEAD = 2
#: The flow control both halves follow: the active party sends its chunk c once every party
#: returned chunk c - WINDOW - 1, so at most WINDOW + 1 of its chunks wait for a party's answer,
#: and a party's chunks the active party holds untaken are bounded the same way (the mailbox).
WINDOW = 2


@dataclass(frozen=True)
class Chunking:
    """``total`` items in chunks of ``size``: ``count`` chunks, chunk c covering ``bounds(c)``."""

    total: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a PSI chunk holds at least 1 ID, not {self.size}")
        if self.total < 0:
            raise ValueError(f"an ID count is at least 0, not {self.total}")

    @property
    def count(self) -> int:
        return -(-self.total // self.size)

    def bounds(self, chunk: int) -> tuple[int, int]:
        """(first item, one past the last) of ``chunk``."""
        if not 0 <= chunk < self.count:
            raise IndexError(f"chunk {chunk} of {self.count}")
        start = chunk * self.size
        return start, min(start + self.size, self.total)

    def length(self, chunk: int) -> int:
        start, stop = self.bounds(chunk)
        return stop - start

    def done_items(self, chunks: int) -> int:
        """How many items the first ``chunks`` chunks hold."""
        return min(chunks * self.size, self.total)


def id_bytes(ids: np.ndarray, rows: np.ndarray) -> list[bytes]:
    """The UTF-8 bytes of ``ids[rows]``: what is hashed to the curve.

    ``ids`` may be any 1-D array of str-like values (object, ``str_`` or ``StringDType``).
    """
    return [str(value).encode("utf-8") for value in ids[rows].tolist()]


def point_list(points: np.ndarray) -> list[bytes]:
    """An (n, 32) uint8 array of u-coordinates as n ``bytes`` (void items keep trailing zero bytes)."""
    if points.ndim != 2 or points.shape[1] != U_BYTES or points.dtype != np.uint8:
        raise ValueError(f"points must be (n, {U_BYTES}) uint8, got {points.dtype} {list(points.shape)}")
    items: list[bytes] = np.ascontiguousarray(points).view(f"V{U_BYTES}").ravel().tolist()
    return items


def packed_points(blob: bytes) -> np.ndarray:
    """What a blinder returns (32 bytes an item, concatenated) as an (n, 32) uint8 array."""
    return np.frombuffer(blob, dtype=np.uint8).reshape(-1, U_BYTES)
