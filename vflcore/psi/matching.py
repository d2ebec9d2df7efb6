"""Matching double-blinded values: which of my items equal which of yours, without the IDs.

After both blindings, equal IDs give equal 32-byte values. Only a prefix is compared
(``MATCH_BYTES``): 12 bytes make a false match between two 1M-item sets about as likely as
10^12 / 2^96 ≈ 10^-17. The first 8 bytes go through numpy's sorted intersection as uint64
(fast at a million items); the other 4 are then checked pair by pair.
"""

from __future__ import annotations

import numpy as np

#: Bytes of each double-blinded value that are sent and compared.
MATCH_BYTES = 12


def truncate(values: np.ndarray) -> np.ndarray:
    """The comparable prefix of blinded values given as an (n, 32) uint8 array."""
    return np.ascontiguousarray(values[:, :MATCH_BYTES])


def match(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) with ``left[i] == right[j]``; both are (n, MATCH_BYTES) uint8 arrays.

    Each side's values are distinct (IDs are deduplicated before blinding, and blinding is a
    bijection), so every value matches at most once.
    """
    if left.shape[1:] != (MATCH_BYTES,) or right.shape[1:] != (MATCH_BYTES,):
        raise ValueError(f"blinded values must be (n, {MATCH_BYTES}) bytes, got {left.shape} and {right.shape}")
    head_left = np.ascontiguousarray(left[:, :8]).view("<u8").ravel()
    head_right = np.ascontiguousarray(right[:, :8]).view("<u8").ravel()
    _, i, j = np.intersect1d(head_left, head_right, assume_unique=False, return_indices=True)
    same_tail = (left[i, 8:] == right[j, 8:]).all(axis=1)
    return i[same_tail].astype(np.int64), j[same_tail].astype(np.int64)
