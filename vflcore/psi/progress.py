"""What survives a party's restart in the middle of PSI, so that the exchange resumes at its last chunk.

Values blinded with a party's secret scalar are worth keeping only while that scalar can be had
again: the active party's stored chunks of party k are ``a·p_k·H(x)`` and ``p_k·a·H(y)``, and
the chunks still to come must be blinded with the same ``a`` and ``p_k`` to match them. So each
party keeps its PSI secrets (the X25519 scalar and the key of its upload order) in a file while
its PSI runs, and deletes it when PSI ends:

- ``<run_dir>/<job>/party-N/psi/progress-<alignment key>/secret``: 56 bytes, mode 0600 in a 0700
  folder, written atomically and synced before the first blinded value leaves the party; never
  logged. ``discard`` removes the folder as soon as the party has its aligned IDs, and when the
  job ends for good (finished, failed, cancelled). A job that is only paused keeps it.
- The active party also keeps, per passive party, its finished chunks of both streams
  (``ChunkLog``: ``from-<k>.bin`` holds ``a·p_k·H(x)``, ``to-<k>.bin`` holds ``p_k·a·H(y)``,
  12 bytes an item in upload order) and the exchange's shape (``exchange.json``). Those are what
  it learns in a run anyway; with its own secret they reveal its pairwise intersections, which
  it learns anyway too.

The folder is named by the alignment key (job, protocol version, every party's ID-set digest),
so changed data on any party never resumes an old exchange. A party tells the active party at
Join which exchanges it can resume (``resumable_keys``); the active party decides, per party,
to resume or to start afresh (``vflcore.work_items.PsiPlan``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

import numpy as np

from vflcore.psi.blinding import BlindingKey
from vflcore.psi.chunks import Chunking
from vflcore.psi.order import ORDER_KEY_BYTES, UploadOrder

__all__ = [
    "ChunkLog",
    "PsiSecrets",
    "discard",
    "discard_all",
    "load_exchange",
    "load_secrets",
    "progress_dir",
    "resumable_keys",
    "save_exchange",
    "save_secrets",
]

PROGRESS_PREFIX: Final = "progress-"
SECRET_FILE: Final = "secret"
EXCHANGE_FILE: Final = "exchange.json"
SECRET_MODE: Final = 0o600
FOLDER_MODE: Final = 0o700
_MAGIC: Final = b"VFLPSI01"
_SCALAR_BYTES: Final = 32


def progress_dir(cache_dir: Path, key: bytes) -> Path:
    """The folder of one exchange's progress: named by the whole alignment key, so the name is the key."""
    return cache_dir / f"{PROGRESS_PREFIX}{key.hex()}"


@dataclass(frozen=True)
class PsiSecrets:
    """A party's secrets of one PSI run: its blinding scalar and the key of its upload order."""

    blinding: BlindingKey
    order_key: bytes

    @classmethod
    def generate(cls) -> PsiSecrets:
        return cls(BlindingKey.generate(), UploadOrder.new_key())

    def order(self, count: int) -> UploadOrder:
        return UploadOrder(count, self.order_key)

    def __repr__(self) -> str:
        return "PsiSecrets(<redacted>)"


def save_secrets(folder: Path, secrets: PsiSecrets) -> Path:
    """Write ``secrets`` to ``folder/secret`` (0600, folder 0700), atomically and synced to disk.

    Synced before it returns because the blinded values computed with it leave the party next:
    a power cut must not leave the active party holding values nobody can extend.
    """
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, FOLDER_MODE)
    target = folder / SECRET_FILE
    tmp = folder / f".{SECRET_FILE}-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_MODE)
    try:
        os.fchmod(fd, SECRET_MODE)  # whatever the umask, and a stale file another run left
        os.write(fd, _MAGIC + secrets.blinding._raw() + secrets.order_key)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def load_secrets(folder: Path) -> PsiSecrets | None:
    """The secrets saved in ``folder``, or None if there are none (or the file is not one of ours)."""
    try:
        raw = (folder / SECRET_FILE).read_bytes()
    except OSError:
        return None
    if len(raw) != len(_MAGIC) + _SCALAR_BYTES + ORDER_KEY_BYTES or not raw.startswith(_MAGIC):
        return None
    scalar = raw[len(_MAGIC) : len(_MAGIC) + _SCALAR_BYTES]
    return PsiSecrets(BlindingKey.from_raw(scalar), raw[len(_MAGIC) + _SCALAR_BYTES :])


def resumable_keys(cache_dirs: Iterable[Path]) -> list[bytes]:
    """Alignment keys of the exchanges whose secrets are kept under these ``psi`` folders."""
    keys = []
    for cache_dir in cache_dirs:
        for folder in sorted(cache_dir.glob(f"{PROGRESS_PREFIX}*")):
            try:
                key = bytes.fromhex(folder.name[len(PROGRESS_PREFIX) :])
            except ValueError:
                continue
            if load_secrets(folder) is not None:
                keys.append(key)
    return keys


def discard(folder: Path) -> None:
    """Delete one exchange's progress: its secrets first, then what was kept with them."""
    (folder / SECRET_FILE).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def discard_all(cache_dir: Path) -> None:
    """Delete every exchange's progress under a ``psi`` folder (the job is over)."""
    for folder in cache_dir.glob(f"{PROGRESS_PREFIX}*"):
        discard(folder)


def save_exchange(folder: Path, chunk_ids: int, counts: Mapping[int, int]) -> None:
    """The shape of the active party's exchange (chunk size, every party's ID count): a resume must match it."""
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"chunk_ids": chunk_ids, "ids": {str(p): n for p, n in sorted(counts.items())}})
    tmp = folder / f".{EXCHANGE_FILE}-{os.getpid()}"
    tmp.write_text(text)
    os.replace(tmp, folder / EXCHANGE_FILE)


def load_exchange(folder: Path) -> tuple[int, dict[int, int]] | None:
    """(chunk size, ID count per party) as ``save_exchange`` wrote them; None if absent or unreadable."""
    try:
        saved = json.loads((folder / EXCHANGE_FILE).read_text())
        return int(saved["chunk_ids"]), {int(p): int(n) for p, n in saved["ids"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


class ChunkLog:
    """One stream's finished chunks of fixed-width values, appended in order to a file.

    ``open`` counts the chunks already there (cutting off a chunk a crash left half written) and
    appends after them; ``chunks`` reads them back one at a time, so the whole stream is never
    in memory at once.
    """

    def __init__(self, path: Path, chunking: Chunking, width: int) -> None:
        self.path, self.chunking, self.width = path, chunking, width
        self.done = 0
        self._file: BinaryIO | None = None

    def open(self, *, fresh: bool = False) -> int:
        """Open for appending; returns how many chunks are complete (0 with ``fresh``: start over)."""
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        size = 0 if fresh or not self.path.exists() else self.path.stat().st_size
        items = size // self.width
        done = self.chunking.count if items >= self.chunking.total else items // self.chunking.size
        keep = self.chunking.done_items(done) * self.width
        handle = self.path.open("r+b" if self.path.exists() else "wb")
        handle.truncate(keep)
        handle.seek(keep)
        self._file, self.done = handle, done
        return done

    def append(self, chunk: int, values: np.ndarray) -> None:
        """Add chunk ``chunk`` (the next one) and flush it, so a restart finds it whole."""
        if self._file is None:
            raise RuntimeError(f"{self.path} is not open")
        if chunk != self.done:
            raise ValueError(f"{self.path}: chunk {chunk} arrived, chunk {self.done} was next")
        expected = (self.chunking.length(chunk), self.width)
        if values.shape != expected or values.dtype != np.uint8:
            raise ValueError(f"{self.path}: chunk {chunk} is {values.dtype} {list(values.shape)}, not uint8 {expected}")
        self._file.write(np.ascontiguousarray(values).tobytes())
        self._file.flush()
        self.done += 1

    def chunks(self) -> Iterator[np.ndarray]:
        """Every chunk written, in order, each an (c, width) uint8 array read from the file."""
        with self.path.open("rb") as fh:
            for chunk in range(self.done):
                length = self.chunking.length(chunk)
                data = fh.read(length * self.width)
                if len(data) != length * self.width:
                    raise OSError(f"{self.path} ends inside chunk {chunk}: it changed while PSI was matching")
                yield np.frombuffer(data, dtype=np.uint8).reshape(length, self.width)

    def close(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()

    def __enter__(self) -> ChunkLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
