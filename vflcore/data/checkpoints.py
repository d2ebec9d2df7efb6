"""Per-party checkpoints: written atomically at every epoch end, the newest few kept, corrupt ones skipped.

Each party writes only its own state, under ``<run_dir>/<job_id>/party-<N>/``: ``epoch-NNNN.pt``
at the end of epoch NNNN, ``epoch-NNNN-batch-BBBBB.pt`` after BBBBB batches of it (with
``[job] checkpoint_every_steps``), only the newest ``keep`` of them, and ``latest.pt``, a copy of
the newest. Each is named by the ``Position`` it resumes at. With ``[job] validation_fraction``
the best position so far is pinned (``best.json``, ``pin``) and kept beyond the newest ``keep``. A power cut or a
``kill -9`` never leaves a half-written file under either name (see ``atomic_write``), yet a
disk can still hand back a truncated or damaged file, so ``readable_checkpoints`` lists only the
epochs whose files load, and a resumed job falls back to an older epoch every party holds.
Loading uses ``weights_only=True``: no pickled code runs.
"""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import structlog

from vflcore.errors import CheckpointError
from vflcore.job.schedule import Position

log = structlog.get_logger(__name__)

#: The copy of the newest checkpoint, under a name that never changes.
LATEST = "latest.pt"
#: The position of the best checkpoint by the validation loss, which pruning keeps (``pin``).
BEST = "best.json"

#: ``epoch-NNNN.pt``: the end of epoch NNNN; ``epoch-NNNN-batch-BBBBB.pt``: BBBBB batches into it.
_CHECKPOINT_FILE = re.compile(r"epoch-(\d+)(?:-batch-(\d+))?\.pt")
#: What ``atomic_write`` leaves behind if the process dies before the rename (only ours: other
#: writers share the folder, such as the model artifact's).
_TEMP_GLOBS = (".epoch-*.pt.*.tmp", f".{LATEST}.*.tmp")


def party_dir(run_dir: Path, job_id: str, party: int) -> Path:
    """Where one party of one job keeps its checkpoints and reports."""
    return run_dir / job_id / f"party-{party}"


def epoch_path(directory: Path, epoch: int) -> Path:
    """The file that holds the checkpoint of the end of epoch ``epoch`` (from 0)."""
    return position_path(directory, Position.after_epoch(epoch))


def position_path(directory: Path, position: Position) -> Path:
    """The file of the checkpoint that resumes at ``position``."""
    if position.batch == 0:
        if position.epoch < 1:
            raise ValueError("a job that starts afresh has no checkpoint")
        return directory / f"epoch-{position.epoch - 1:04d}.pt"
    return directory / f"epoch-{position.epoch:04d}-batch-{position.batch:05d}.pt"


def save_checkpoint(directory: Path, epoch: int, state: dict[str, Any], *, keep: int = 2) -> Path:
    """The checkpoint of the end of epoch ``epoch``: ``save_position`` at ``Position.after_epoch(epoch)``."""
    return save_position(directory, Position.after_epoch(epoch), state, keep=keep)


def save_position(directory: Path, position: Position, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write the checkpoint of ``position`` and ``latest.pt`` atomically, then keep only the newest ``keep``.

    The older files go only once the new one is on disk, so at every moment at least one whole
    checkpoint exists. The file just written is never deleted, even if newer ones are present.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the newest checkpoint), got {keep}")
    directory.mkdir(parents=True, exist_ok=True)
    import torch  # here, not at the top: ``atomic_write`` serves processes that never train (``vfl-score``)

    buffer = io.BytesIO()
    # "position" names what the file holds; "epoch" (the last epoch begun) is for a human reader.
    torch.save({"position": tuple(position), "epoch": position.epoch - (position.batch == 0), **state}, buffer)
    target = position_path(directory, position)
    atomic_write(buffer.getvalue(), target)  # serialised once, written twice
    atomic_write(buffer.getvalue(), directory / LATEST)
    _prune(directory, keep, written=position)
    return target


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint without unpickling arbitrary objects."""
    import torch

    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def checkpoint_positions(directory: Path) -> list[Position]:
    """The positions that have a checkpoint file in ``directory``, in training order; [] if none."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _CHECKPOINT_FILE.fullmatch(path.name)
        if match is None:
            continue
        epoch, batch = int(match.group(1)), match.group(2)
        found.append(Position.after_epoch(epoch) if batch is None else Position(epoch, int(batch)))
    return sorted(found)


def checkpoint_epochs(directory: Path) -> list[int]:
    """The epochs (from 0) whose end has a checkpoint file in ``directory``, ascending."""
    return [p.epoch - 1 for p in checkpoint_positions(directory) if p.batch == 0]


def readable_checkpoints(directory: Path) -> list[Position]:
    """The positions whose checkpoint file loads, in order: what this party offers to resume from.

    Each file is read in full, because a truncated one only fails when it is read; the unreadable
    ones are left out with a ``checkpoint_unreadable`` warning, so the job resumes from an older one.
    """
    found = []
    for position in checkpoint_positions(directory):
        path = position_path(directory, position)
        try:
            _checked(path, position)
        except CheckpointError as exc:
            log.warning("checkpoint_unreadable", path=str(path), reason=str(exc))
            continue
        found.append(position)
    return found


def load_position(directory: Path, position: Position) -> dict[str, Any]:
    """The checkpoint of ``position``; CheckpointError names the file if it is missing or unreadable."""
    path = position_path(directory, position)
    try:
        return _checked(path, position)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint of {position} ({exc})") from exc


def discard_after(directory: Path, position: Position) -> None:
    """Delete the checkpoints newer than ``position`` (``Position(0, 0)``: all): a rollback abandons that future.

    ``latest.pt`` is then a copy of the newest checkpoint kept, or gone if none is. Without this,
    a rolled-back party would hold two different futures under the same names, and a job id used
    again would resume from an older run's files.
    """
    if not directory.is_dir():
        return
    for newer in (p for p in checkpoint_positions(directory) if p > position):
        position_path(directory, newer).unlink(missing_ok=True)
    best = pinned(directory)
    if best is not None and best > position:
        (directory / BEST).unlink(missing_ok=True)
    kept = checkpoint_positions(directory)
    if kept:
        atomic_write(position_path(directory, kept[-1]).read_bytes(), directory / LATEST)
    else:
        (directory / LATEST).unlink(missing_ok=True)
    _fsync_directory(directory)


def _checked(path: Path, position: Position) -> dict[str, Any]:
    """The state in ``path``, if it loads and holds ``position``; else CheckpointError with the reason alone."""
    try:
        state = load_checkpoint(path)
    # torch.load reports damage as whatever its reader trips over first: OSError for a
    # truncated zip, KeyError or UnpicklingError for garbage, EOFError for an empty file,
    # RuntimeError for a non-zip file. Any of them means only "not this file".
    except Exception as exc:
        raise CheckpointError(f"{type(exc).__name__}: {_first_line(exc)}") from exc
    held = state.get("position") if isinstance(state, dict) else type(state).__name__
    if not isinstance(held, tuple) or held != tuple(position):
        raise CheckpointError(f"it holds position {held!r}, not {tuple(position)!r}")
    return state


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def atomic_write(data: bytes, target: Path, *, mode: int = 0o600) -> None:
    """Put ``data`` at ``target`` so that after a crash or power cut it holds either the old or the new bytes.

    The file gets ``mode``: 0600 (the owner alone) unless the caller says otherwise.

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
        os.chmod(tmp, mode)
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


def pin(directory: Path, position: Position) -> None:
    """Keep the checkpoint of ``position`` however many newer ones follow: the best epoch's, by validation.

    Written to disk (``best.json``), so a party restarted mid-job keeps it through the saves that
    come before the active party names the best again. One position at a time: the old best goes
    at the next save, once it is not among the newest ``keep``.
    """
    if pinned(directory) == position:
        return
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(json.dumps([position.epoch, position.batch]).encode(), directory / BEST)


def pinned(directory: Path) -> Position | None:
    """The position ``pin`` keeps in ``directory``, or None (none pinned, or a file that does not read)."""
    try:
        epoch, batch = json.loads((directory / BEST).read_text())
        return Position(int(epoch), int(batch))
    except (OSError, ValueError, TypeError):
        return None


def _prune(directory: Path, keep: int, *, written: Position) -> None:
    """Delete the checkpoints older than the newest ``keep`` but the pinned one, and temporary files a crash left."""
    kept = [*checkpoint_positions(directory)[-keep:], pinned(directory)]
    stale = [position_path(directory, p) for p in checkpoint_positions(directory) if p not in kept and p != written]
    for pattern in _TEMP_GLOBS:  # no save runs alongside this one: each party's folder has one writer
        stale += directory.glob(pattern)
    # No fsync of the folder: a deletion that a power cut undoes is simply made again at the next save.
    for path in stale:
        path.unlink(missing_ok=True)
