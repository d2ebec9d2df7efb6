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
import os
import secrets
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


__all__ = ["KEY_FILE", "noise_generator", "noise_key"]
