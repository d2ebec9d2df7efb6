"""The secret order a party uploads its IDs in: a keyed pseudorandom permutation, computed per chunk.

Why an order at all: the active party later tells each passive party which of its upload
positions are in the intersection. Positions in file order (or sorted order) would tell the
active party where the party's other IDs lie (and a file sorted by, say, income would leak
more). So each party uploads in a fresh secret order, and positions say nothing.

Why not ``rng.permutation(n)``: that is an index array of 8 bytes per ID held for the whole
exchange, and PSI must not grow with the ID count beyond the aligned result and one sorted array
(docs/explanation/psi.md). A keyed permutation computes ``position -> row`` for any chunk of positions on
demand, and what has to survive a restart (``vflcore.psi.progress``) is its 16-byte key.

Construction: a Feistel network on Z_a × Z_a with a = ceil(sqrt(n)) (the numeral-string Feistel
of NIST SP 800-38G's FF1, without its tweak and radix encoding): ``(L, R) -> (R, L + F_r(R) mod a)``
for ``ROUNDS`` rounds, with ``F_r`` the first 8 bytes of AES-128 of the block (r, R) under the key,
reduced mod a. That is a permutation of [0, a²); cycle walking (apply it again while the result is
≥ n) restricts it to [0, n). a² - n < 2a + 1, so walks are rare and short. AES runs once per round
on a whole chunk (ECB over distinct blocks: a PRF evaluation per block, not encryption of data).
"""

from __future__ import annotations

import math
import os
from typing import Final

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

__all__ = ["ORDER_KEY_BYTES", "UploadOrder"]

ORDER_KEY_BYTES: Final = 16
ROUNDS: Final = 10  # FF1's count; each round is one AES pass over the chunk, so it costs little
_SLICE: Final = 1 << 16


class UploadOrder:
    """``rows(positions)``: which of a party's ``count`` rows it uploads at each position.

    Deterministic for a given key and count, a bijection of [0, count), and unpredictable
    without the key. ``repr`` hides the key.
    """

    __slots__ = ("_cipher", "_side", "count")

    def __init__(self, count: int, key: bytes) -> None:
        if count < 0:
            raise ValueError(f"count must be at least 0, got {count}")
        if len(key) != ORDER_KEY_BYTES:
            raise ValueError(f"an upload order key is {ORDER_KEY_BYTES} bytes, got {len(key)}")
        self.count = count
        self._side = max(1, math.isqrt(max(count - 1, 0)) + 1)  # a with a² >= count
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())

    @staticmethod
    def new_key() -> bytes:
        """A fresh key from the OS CSPRNG: one per PSI run and party."""
        return os.urandom(ORDER_KEY_BYTES)

    def __repr__(self) -> str:
        return f"UploadOrder(count={self.count}, key=<redacted>)"

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """The row uploaded at each of ``positions`` (each in [0, count)), as int64."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.count):
            raise ValueError(f"positions must lie in [0, {self.count})")
        out = np.empty(len(positions), dtype=np.int64)
        for start in range(0, len(positions), _SLICE):  # slices that stay in cache: 4x faster at 10M
            part = self._permute(positions[start : start + _SLICE].astype(np.uint64))
            walking = part >= self.count
            while walking.any():  # cycle walking: the permutation of [0, a²) again until inside [0, n)
                part[walking] = self._permute(part[walking])
                walking = part >= self.count
            out[start : start + _SLICE] = part
        return out

    def span(self, start: int, stop: int) -> np.ndarray:
        """``rows`` of the positions start, start + 1, ..., stop - 1: one chunk of the upload."""
        return self.rows(np.arange(start, stop, dtype=np.int64))

    def _permute(self, values: np.ndarray) -> np.ndarray:
        side = np.uint64(self._side)
        left: np.ndarray = values // side
        right: np.ndarray = values % side
        encryptor = self._cipher.encryptor()
        block = np.zeros((len(values), 2), dtype="<u8")
        for round_ in range(ROUNDS):
            block[:, 0] = round_
            block[:, 1] = right
            mixed = np.frombuffer(encryptor.update(block.tobytes()), dtype="<u8")[0::2]
            left, right = right, (left + mixed % side) % side
        encryptor.finalize()
        result: np.ndarray = left * side + right
        return result
