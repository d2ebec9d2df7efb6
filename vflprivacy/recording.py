"""Recording what a passive party sends and receives, through its own code path, for the attack probes.

An attack measured on a copy of the training maths measures the copy. So the recorder wraps the
very link the party's algorithm trains over: ``RecordingLink`` passes every call on to the real
link (the gRPC connection, or a defence wrapping it) and keeps a copy of each tensor that crossed
it: what the party SENT (what the active party received: embeddings, APFed's gradients) and what
it RECEIVED (gradients, ADMM state, APFed's h^A), by (round, batch on the wire, name). After
training the party also records its trained model's representation of every aligned row (model
completion freezes that model), and how many aligned rows there are.

The recording holds the very values the project keeps out of every log, so it is written as
plain ``.npy`` files (no pickle) readable by the party's owner alone (mode 0600), and it
exists only when a party's owner asks for one: ``PassiveParty(..., recorder=LinkRecorder(folder))``.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np

from vflcore.errors import VflError
from vflcore.wire.links import TensorExchange, TrainingLink
from vflcore.wire.tensors import TensorKey

#: What the party sent (what the active party received), and what it received.
SENT, RECEIVED = "sent", "received"
#: The trained model's representation of every aligned row, and the aligned row count.
EMBEDDINGS_FILE, ROWS_FILE = "embeddings.npy", "rows.json"
_TENSOR_FILE = re.compile(r"^(?P<batch>\d+)\.(?P<name>.+)\.npy$")


class LinkRecorder:
    """Writes the tensors of one passive party's training under ``folder``, one ``.npy`` file each.

    Layout: ``<folder>/{sent,received}/<round>/<batch>.<name, URL-quoted>.npy``, plus
    ``embeddings.npy`` and ``rows.json`` once training is over. A batch recorded twice (a job
    resumed inside an epoch repeats nothing, but a rerun into the same folder would) keeps the last copy.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def record(self, direction: str, key: TensorKey, array: np.ndarray) -> None:
        """Keep a copy of one tensor that crossed the link in ``direction`` (``SENT`` or ``RECEIVED``)."""
        if direction not in (SENT, RECEIVED):
            raise ValueError(f"direction is {SENT!r} or {RECEIVED!r}, got {direction!r}")
        folder = self.folder / direction / f"{key.round:05d}"
        _private_write(folder / f"{key.batch:06d}.{quote(key.name, safe='')}.npy", _npy(array))

    def record_trained(self, embed: Callable[[np.ndarray], np.ndarray], aligned_rows: int) -> None:
        """After training: the party's own ``embed`` of every aligned row, and the aligned row count.

        A party with no representation of its own (APFed: the active party predicts alone) records
        only the count.
        """
        try:
            embeddings = np.asarray(embed(np.arange(aligned_rows, dtype=np.int64)))
        except VflError:
            embeddings = None
        if embeddings is not None:
            _private_write(self.folder / EMBEDDINGS_FILE, _npy(embeddings))
        _private_write(self.folder / ROWS_FILE, json.dumps({"aligned_rows": int(aligned_rows)}).encode())


class Recording:
    """A ``LinkRecorder``'s folder, read back."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def tensors(self, direction: str, name: str) -> dict[tuple[int, int], np.ndarray]:
        """Every tensor named ``name`` that crossed in ``direction``, by (round, batch on the wire)."""
        found: dict[tuple[int, int], np.ndarray] = {}
        for round_dir in sorted((self.folder / direction).glob("[0-9]*")):
            for path in sorted(round_dir.glob("*.npy")):
                match = _TENSOR_FILE.match(path.name)
                if match and unquote(match["name"]) == name:
                    found[(int(round_dir.name), int(match["batch"]))] = np.load(path, allow_pickle=False)
        return found

    def names(self, direction: str) -> set[str]:
        """The names of the tensors recorded in ``direction``."""
        return {
            unquote(match["name"])
            for path in (self.folder / direction).glob("*/*.npy")
            if (match := _TENSOR_FILE.match(path.name))
        }

    def embeddings(self) -> np.ndarray | None:
        """The trained model's representation of every aligned row; None if the party has none."""
        path = self.folder / EMBEDDINGS_FILE
        return np.load(path, allow_pickle=False) if path.exists() else None

    def aligned_rows(self) -> int | None:
        """How many aligned rows the party trained on; None before training ended."""
        path = self.folder / ROWS_FILE
        return int(json.loads(path.read_text())["aligned_rows"]) if path.exists() else None


class RecordingExchange(TensorExchange):
    """One round of the wrapped link, each upload and answer copied to the recorder as it passes."""

    def __init__(self, inner: TensorExchange, recorder: LinkRecorder, job_id: str, round_: int, up: str) -> None:
        self._inner, self._recorder = inner, recorder
        self._job_id, self._round, self._up = job_id, round_, up

    def send(self, batch: int, array: np.ndarray) -> None:
        self._inner.send(batch, array)
        self._recorder.record(SENT, TensorKey(self._job_id, self._round, batch, self._up), array)

    def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
        bundle = self._inner.receive_bundle(batch)
        for name, array in bundle.items():
            self._recorder.record(RECEIVED, TensorKey(self._job_id, self._round, batch, name), array)
        return bundle

    def close(self) -> None:
        self._inner.close()

    def cancel(self) -> None:
        self._inner.cancel()


class RecordingLink(TrainingLink):
    """The link a passive party's algorithm trains over, recording what crosses it; otherwise unchanged."""

    def __init__(self, inner: TrainingLink, recorder: LinkRecorder) -> None:
        self._inner, self.recorder = inner, recorder

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        self._inner.send(key, array)
        self.recorder.record(SENT, key, array)

    def receive(self, key: TensorKey) -> np.ndarray:
        array = self._inner.receive(key)
        self.recorder.record(RECEIVED, key, array)
        return array

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        inner = self._inner.exchange(job_id, round_, batches, up=up, down=down, first=first)
        return RecordingExchange(inner, self.recorder, job_id, round_, up)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def _private_write(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` for the owner alone (mode 0600), replacing it whole.

    Not synced to disk: a recording is evidence for a measurement, not state a job resumes from.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


__all__ = [
    "EMBEDDINGS_FILE",
    "RECEIVED",
    "ROWS_FILE",
    "SENT",
    "LinkRecorder",
    "Recording",
    "RecordingExchange",
    "RecordingLink",
]
