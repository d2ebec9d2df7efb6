"""Per-party checkpoints: written atomically at every epoch end, the newest few kept, corrupt ones skipped.

Each party writes only its own state, under ``<run_dir>/<job_id>/party-<N>/``: ``epoch-NNNN.pt``
for the newest ``keep`` epochs and ``latest.pt``, a copy of the newest. A power cut or a
``kill -9`` never leaves a half-written file under either name (see ``_atomic_write``), yet a
disk can still hand back a truncated or damaged file, so ``readable_checkpoints`` lists only the
epochs whose files load, and a resumed job falls back to an older epoch every party holds.
Loading uses ``weights_only=True``: no pickled code runs.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import structlog
import torch

from vflcore.errors import CheckpointError

log = structlog.get_logger(__name__)

#: The copy of the newest checkpoint, under a name that never changes.
LATEST = "latest.pt"

_EPOCH_FILE = re.compile(r"epoch-(\d+)\.pt")
#: What ``_atomic_write`` leaves behind if the process dies before the rename (only ours: other
#: writers share the folder, such as the model artifact's).
_TEMP_GLOBS = (".epoch-*.pt.*.tmp", f".{LATEST}.*.tmp")


def party_dir(run_dir: Path, job_id: str, party: int) -> Path:
    """Where one party of one job keeps its checkpoints and reports."""
    return run_dir / job_id / f"party-{party}"


def epoch_path(directory: Path, epoch: int) -> Path:
    """The file that holds epoch ``epoch``'s checkpoint."""
    return directory / f"epoch-{epoch:04d}.pt"


def save_checkpoint(directory: Path, epoch: int, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write ``epoch-NNNN.pt`` and ``latest.pt`` atomically, then delete all but the newest ``keep`` epochs.

    The older files go only once the new one is on disk, so at every moment at least one whole
    checkpoint exists. The file just written is never deleted, even if newer epochs are present.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the newest checkpoint), got {keep}")
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({"epoch": epoch, **state}, buffer)  # serialised once, written twice
    target = epoch_path(directory, epoch)
    _atomic_write(buffer.getvalue(), target)
    _atomic_write(buffer.getvalue(), directory / LATEST)
    _prune(directory, keep, written=epoch)
    return target


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint without unpickling arbitrary objects."""
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def checkpoint_epochs(directory: Path) -> list[int]:
    """The epochs that have an ``epoch-NNNN.pt`` file in ``directory``, ascending; [] if there is none."""
    if not directory.is_dir():
        return []
    found = (_EPOCH_FILE.fullmatch(p.name) for p in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m is not None)


def readable_checkpoints(directory: Path) -> list[int]:
    """The epochs whose checkpoint file loads, ascending: what this party offers as a rollback point.

    Each file is read in full, because a truncated one only fails when it is read; the unreadable
    ones are left out with a ``checkpoint_unreadable`` warning, so the server picks an older epoch.
    """
    found = []
    for epoch in checkpoint_epochs(directory):
        if _readable(epoch_path(directory, epoch), epoch):
            found.append(epoch)
    return found


def load_epoch(directory: Path, epoch: int) -> dict[str, Any]:
    """The checkpoint of ``epoch``; CheckpointError names the file if it is missing or unreadable."""
    path = epoch_path(directory, epoch)
    try:
        state = load_checkpoint(path)
    except Exception as exc:  # any reader error means "not this file" (see _readable)
        raise CheckpointError(f"{path}: cannot read the checkpoint of epoch {epoch + 1} ({_first_line(exc)})") from exc
    if not isinstance(state, dict) or state.get("epoch") != epoch:
        raise CheckpointError(f"{path}: it does not hold the checkpoint of epoch {epoch + 1}")
    return state


def discard_after(directory: Path, epoch: int) -> None:
    """Delete the checkpoints newer than ``epoch`` (-1: all of them): a rollback abandons that future.

    ``latest.pt`` is then a copy of the newest epoch kept, or gone if none is. Without this, a
    rolled-back party would hold two different futures under the same epoch numbers, and a job
    id used again would resume from an older run's files.
    """
    if not directory.is_dir():
        return
    for newer in (e for e in checkpoint_epochs(directory) if e > epoch):
        epoch_path(directory, newer).unlink(missing_ok=True)
    kept = checkpoint_epochs(directory)
    if kept:
        _atomic_write(epoch_path(directory, kept[-1]).read_bytes(), directory / LATEST)
    else:
        (directory / LATEST).unlink(missing_ok=True)
    _fsync_directory(directory)


def _readable(path: Path, epoch: int) -> bool:
    """Whether ``path`` loads and holds epoch ``epoch``; a ``checkpoint_unreadable`` warning says why not."""
    try:
        state = load_checkpoint(path)
    # torch.load reports damage as whatever its reader trips over first: OSError for a
    # truncated zip, KeyError or UnpicklingError for garbage, EOFError for an empty file,
    # RuntimeError for a non-zip file. Any of them means only "not this file".
    except Exception as exc:
        _unreadable(path, f"{type(exc).__name__}: {_first_line(exc)}")
        return False
    if not isinstance(state, dict) or state.get("epoch") != epoch:
        held = state.get("epoch") if isinstance(state, dict) else type(state).__name__
        _unreadable(path, f"it holds epoch {held!r}, not {epoch}")
        return False
    return True


def _unreadable(path: Path, reason: str) -> None:
    log.warning("checkpoint_unreadable", path=str(path), reason=reason)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _atomic_write(data: bytes, target: Path) -> None:
    """Put ``data`` at ``target`` so that after a crash or power cut it holds either the old or the new bytes.

    1. Write a temporary file in the same folder: ``os.replace`` is atomic only within one
       file system, and a crash now leaves ``target`` untouched.
    2. Flush Python's buffer and ``fsync`` the file: the bytes must be on disk before the rename
       publishes them, or a power cut could leave ``target`` naming an empty or partial file.
    3. ``os.replace`` onto ``target``: readers see the old file or the new one, never a mix.
    4. ``fsync`` the folder: the rename is a change to the folder, and until the folder is
       synced a power cut can undo it.
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(directory: Path, keep: int, *, written: int) -> None:
    """Delete the epoch files older than the newest ``keep``, and temporary files a crash left."""
    stale = [epoch_path(directory, e) for e in checkpoint_epochs(directory)[:-keep] if e != written]
    for pattern in _TEMP_GLOBS:  # no save runs alongside this one: each party's folder has one writer
        stale += directory.glob(pattern)
    # No fsync of the folder: a deletion that a power cut undoes is simply made again at the next save.
    for path in stale:
        path.unlink(missing_ok=True)
