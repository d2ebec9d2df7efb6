"""Each party's secret noise key, and the generators its defences draw from.

Noise must be reproducible by the party that adds it (a job resumed after a crash sends exactly
what the uninterrupted run would have) and by no one else: a noise drawn from the job's seed could
be regenerated, and subtracted, by every other party of the job. So each party draws from a
256-bit key of its own, created at its first use in the job's folder (mode 0600, beside the
party's checkpoints, and never sent), and a generator is keyed by where the noise is used: a
defence's name, the epoch, the batch on the wire, the party. The same place gives the same noise
in any process on any CPU (NumPy's PCG64 and its normal sampler are integer-exact).
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vflcore.data.checkpoints import atomic_write
from vflcore.errors import ConfigError

#: The key's file in a party's job folder (``<run_dir>/<job_id>/party-<N>/``).
KEY_FILE = "privacy.key"
_KEY_BYTES = 32


def noise_key(folder: Path) -> bytes:
    """The party's noise key for the job whose folder this is; created (mode 0600) the first time."""
    path = folder / KEY_FILE
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(secrets.token_bytes(_KEY_BYTES), path)
    key = path.read_bytes()
    if len(key) != _KEY_BYTES:
        raise ConfigError(
            f"{path} holds {len(key)} bytes, not a {_KEY_BYTES}-byte noise key; restore it from a backup, "
            "or delete it to start the job's defences afresh (a resumed run then draws different noise)"
        )
    if os.name == "posix" and path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return key


def noise_generator(key: bytes, defence: str, *where: int) -> np.random.Generator:
    """A generator for one use of one defence: the same ``key``, ``defence`` and ``where`` give the same draws."""
    words = [int.from_bytes(hashlib.blake2b(defence.encode(), digest_size=8).digest(), "little"), *map(int, where)]
    if any(w < 0 for w in words):
        raise ValueError(f"noise positions are counted from 0, got {where}")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(int.from_bytes(key, "little"), spawn_key=words)))


class RowNormals:
    """Standard normal draws for a batch's rows, a share ``persistence`` (ρ) of each the same for its row all job.

    Why: noise drawn afresh for every release averages away. A passive party lines a row's
    releases up by its own IDs and averages T of them (issue 48: APFed-C's noised h^A gave the
    direction attack 0.86 after 10 epochs' average), and fresh noise's variance falls as 1/T.
    Here each draw is √(1−ρ)·fresh + √ρ·z, z drawn from a generator keyed by the row itself: z
    is the same in every epoch, whichever batch and position the row is in. Each draw is still
    exactly standard normal, so every single release is as noised as with ρ = 0; an average of T
    releases keeps variance ρ + (1−ρ)/T, never below ρ. What that buys and costs in ε is the
    accountant's (``vflprivacy.accounting``).

    Draws are made in the same order for a row in every epoch (``standard_normal`` calls of the
    same shapes), so its fixed share plays the same part each time. ``persistence`` 0 gives the
    fresh generator's draws exactly.
    """

    def __init__(
        self,
        fresh: np.random.Generator,
        key: bytes,
        defence: str,
        stream: tuple[int, ...],
        rows: Sequence[int] | np.ndarray,
        persistence: float,
    ) -> None:
        if not 0 <= persistence < 1:
            raise ValueError(f"persistence = {persistence} must be in [0, 1)")
        self.fresh, self.persistence = fresh, persistence
        self._rows = [noise_generator(key, f"{defence}/row", *stream, int(r)) for r in rows] if persistence else []

    def standard_normal(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Draws of shape ``size``, one row of them per batch row (``size[0]`` is the batch's rows)."""
        size = (size,) if isinstance(size, int) else tuple(size)
        fresh: np.ndarray = self.fresh.standard_normal(size)
        if not self.persistence:
            return fresh
        if size[0] != len(self._rows):
            raise ValueError(f"draws for {size[0]} rows from a batch of {len(self._rows)}")
        fixed = np.stack([g.standard_normal(size[1:]) for g in self._rows]) if self._rows else np.zeros(size)
        mixed: np.ndarray = math.sqrt(1 - self.persistence) * fresh + math.sqrt(self.persistence) * fixed
        return mixed

    def normal(self, loc: float, scale: float, size: tuple[int, ...]) -> np.ndarray:
        """``loc + scale`` × ``standard_normal(size)``; with ``persistence`` 0, the fresh generator's ``normal``."""
        if not self.persistence:
            drawn: np.ndarray = self.fresh.normal(loc, scale, size=size)
            return drawn
        return loc + scale * self.standard_normal(size)


__all__ = ["KEY_FILE", "RowNormals", "noise_generator", "noise_key"]
