"""Saved alignments: a party that restarts on the same data skips PSI.

An alignment is keyed by ``alignment_key``: a SHA-256 over the job id, the protocol version and
every party's ID-set digest. Changed data on any party changes its digest, hence the key, and
PSI runs again. Each party stores only its own result (the aligned IDs, in the agreed order) as
a plain ``.npz`` of their UTF-8 bytes back to back and each one's end (no padding: 1 byte a
character for ASCII IDs, which mattered at 8M aligned IDs), loaded with ``allow_pickle=False``
into numpy strings (``StringDType``: no Python object per ID, which a job reusing an alignment
of 10M rows would otherwise hold); files of older versions, which hold unicode strings or
fixed-width UTF-8, still load. The active party also stores the pairwise overlaps PSI found
(party -> size of its IDs ∩ that party's), so that a job that reuses the alignment (a resumed one) still reports them in
``summary.json``: they are figures it learnt from the exchange, which a reuse skips.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
from numpy.dtypes import StringDType

from vflcore.data.id_arrays import from_utf8_buffers, utf8_buffers

PROTOCOL_VERSION = "ecdh-psi-x25519-ell2-v1"


def alignment_key(job_id: str, digests: Mapping[int, bytes]) -> bytes:
    """The key under which every party files this job's alignment of exactly these ID sets."""
    h = hashlib.sha256()
    h.update(PROTOCOL_VERSION.encode())
    h.update(b"\0" + job_id.encode("utf-8") + b"\0")
    for party in sorted(digests):
        h.update(party.to_bytes(4, "big") + digests[party])
    return h.digest()


def cache_path(directory: Path, key: bytes) -> Path:
    return directory / f"alignment-{key.hex()[:32]}.npz"


def save_alignment(
    directory: Path,
    key: bytes,
    aligned_ids: np.ndarray,
    id_digest: bytes,
    pairwise: Mapping[int, int] | None = None,
) -> Path:
    """Write the aligned IDs atomically, with the digest of the ID column they came from.

    ``pairwise`` (the active party's only) is kept beside them, for ``load_pairwise``.
    """
    overlaps = dict(pairwise or {})
    parties = sorted(overlaps)
    directory.mkdir(parents=True, exist_ok=True)
    target = cache_path(directory, key)
    ends, data = utf8_buffers(aligned_ids)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".alignment-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(
                fh,
                ids_utf8_ends=ends,
                ids_utf8_data=data,
                key=np.frombuffer(key, np.uint8),
                id_digest=np.frombuffer(id_digest, np.uint8),
                pairwise_parties=np.asarray(parties, dtype=np.int64),
                pairwise_sizes=np.asarray([overlaps[p] for p in parties], dtype=np.int64),
            )
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _from_utf8(encoded: np.ndarray, block: int = 1 << 20) -> np.ndarray:
    """The fixed-width UTF-8 IDs of earlier versions' files, as numpy strings (``StringDType``), a block at a time.

    Decoding widens to 4 bytes a character, so only one block is ever held in that form.
    """
    out = np.empty(len(encoded), dtype=StringDType())
    for start in range(0, len(encoded), block):
        out[start : start + block] = np.strings.decode(encoded[start : start + block], "utf-8")
    return out


def load_alignment(directory: Path, key: bytes, id_digest: bytes) -> np.ndarray | None:
    """The saved aligned IDs for ``key``, or None if absent, unreadable or for other data."""
    path = cache_path(directory, key)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            if saved["key"].tobytes() != key or saved["id_digest"].tobytes() != id_digest:
                return None
            if "ids_utf8_data" in saved.files:
                return from_utf8_buffers(saved["ids_utf8_ends"], saved["ids_utf8_data"])
            if "ids_utf8" in saved.files:  # the fixed-width form of earlier versions
                return _from_utf8(saved["ids_utf8"])
            ids: np.ndarray = saved["ids"].astype(StringDType())
            return ids
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


def load_pairwise(directory: Path, key: bytes, id_digest: bytes) -> dict[int, int]:
    """The pairwise overlaps saved with the alignment for ``key``; {} if none were saved.

    None are saved by a passive party, nor in files written before they were (older versions):
    the alignment itself is still reused, only the figures are missing.
    """
    path = cache_path(directory, key)
    try:
        with np.load(path, allow_pickle=False) as saved:
            if saved["key"].tobytes() != key or saved["id_digest"].tobytes() != id_digest:
                return {}
            if "pairwise_parties" not in saved.files:
                return {}
            parties, sizes = saved["pairwise_parties"].tolist(), saved["pairwise_sizes"].tolist()
    except (OSError, ValueError, KeyError):
        return {}
    return {int(party): int(size) for party, size in zip(parties, sizes, strict=True)}


def cached_keys(directory: Path) -> list[bytes]:
    """Keys of the alignments saved in ``directory`` (what a party tells the server it has)."""
    keys = []
    for path in sorted(directory.glob("alignment-*.npz")):
        try:
            with np.load(path, allow_pickle=False) as saved:
                keys.append(saved["key"].tobytes())
        except (OSError, ValueError, KeyError):
            continue
    return keys
