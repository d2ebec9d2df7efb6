"""Matching double-blinded values: which of my items equal which of yours, without the IDs.

After both blindings, equal IDs give equal 32-byte values. Only a prefix is compared
(``MATCH_BYTES``): 12 bytes make a false match between two 1M-item sets about as likely as
10^12 / 2^96 ≈ 10^-17. All 12 bytes go through numpy's sorted intersection as one opaque
(void) value, about 1.6 s for two 1M-item sets. Matching on an 8-byte prefix first and checking
the rest afterwards is twice as fast but wrong when two values of one side share the prefix:
the intersection keeps only the first of them and a true match can be lost.
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
    if left.dtype != np.uint8 or right.dtype != np.uint8:
        raise ValueError(f"blinded values must be uint8, got {left.dtype} and {right.dtype}")
    whole = np.dtype((np.void, MATCH_BYTES))
    _, i, j = np.intersect1d(
        np.ascontiguousarray(left).view(whole).ravel(),
        np.ascontiguousarray(right).view(whole).ravel(),
        assume_unique=False,
        return_indices=True,
    )
    return i.astype(np.int64), j.astype(np.int64)
