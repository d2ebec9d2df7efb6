"""Per-party checkpoints: model, optimizer and epoch, written atomically at every epoch end.

Each party writes only its own state, under ``<run_dir>/<job_id>/party-<N>/``. A checkpoint is
written to a temporary file and renamed into place, so a crash never leaves a half-written
file where ``latest.pt`` should be. Loading uses ``weights_only=True``: no pickled code runs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def party_dir(run_dir: Path, job_id: str, party: int) -> Path:
    """Where one party of one job keeps its checkpoints and reports."""
    return run_dir / job_id / f"party-{party}"


def save_checkpoint(directory: Path, epoch: int, state: dict[str, Any]) -> Path:
    """Write ``epoch-NNNN.pt`` and point ``latest.pt`` at the same content, both atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    payload = {"epoch": epoch, **state}
    target = directory / f"epoch-{epoch:04d}.pt"
    _atomic_save(payload, target)
    _atomic_save(payload, directory / "latest.pt")
    return target


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint without unpickling arbitrary objects."""
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def _atomic_save(payload: dict[str, Any], target: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
