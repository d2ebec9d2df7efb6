"""A passive party's own check of what it sends: NaN and infinity never leave it, divergence is reported.

A party whose model ran away would otherwise send NaN, and the server's tensor check would refuse
it (TensorRejected) in words that name a field, not the cause. ``CheckedLink`` stands between the
algorithm and the link: an upload with a NaN or infinite value raises ``TrainingDiverged`` instead,
naming this party, the epoch and batch (from 1) and the job's settings to change; the party
reports it as its failure (``PassiveParty._work``) and the server ends the job in those words.
``checked_state`` does the same for a checkpoint, so none is written from non-finite weights.
"""

from __future__ import annotations

import numpy as np

from vflalgorithms.divergence import divergence_advice, nonfinite, nonfinite_state
from vflcore.errors import TrainingDiverged
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.wire.links import FilteredExchange, TensorExchange, TrainingLink
from vflcore.wire.names import EVAL_EMBEDDING
from vflcore.wire.tensors import TensorKey


def check_upload(party: int, job: JobSpec, name: str, round_: int, batch: int, array: np.ndarray) -> None:
    """Raise TrainingDiverged if ``array`` (party ``party``'s upload ``name``) is not finite.

    ``round_`` is the epoch (from 0) and ``batch`` the wire's index; an evaluation upload names
    the epoch it follows.
    """
    bad = nonfinite(array)
    if bad is None:
        return
    advice = divergence_advice(job)
    if name == EVAL_EMBEDDING:
        what = f"party {party}'s representation of the held-out rows is not finite ({bad}), so it was not sent"
        raise TrainingDiverged(what, epoch=round_ + 1, advice=advice)
    what = f"party {party}'s {name} is not finite ({bad}), so it was not sent"
    raise TrainingDiverged(what, epoch=round_ + 1, batch=batch + 1, advice=advice)


def checked_state(party: int, job: JobSpec, position: Position, state: dict[str, object]) -> dict[str, object]:
    """``state``, if every value in it is finite; else TrainingDiverged: no checkpoint is written from it."""
    bad = nonfinite_state(state)
    if bad is None:
        return state
    epoch, batch = (position.epoch, None) if position.batch == 0 else (position.epoch + 1, position.batch)
    what = f"party {party}'s model is not finite ({bad}), so {position} was not saved"
    raise TrainingDiverged(what, epoch=epoch, batch=batch, advice=divergence_advice(job))


class CheckedLink(TrainingLink):
    """The link a passive party's algorithm trains over, refusing to send a NaN or infinite upload."""

    def __init__(self, inner: TrainingLink, party: int, job: JobSpec) -> None:
        self.inner, self.party, self.job = inner, party, job

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        check_upload(self.party, self.job, key.name, key.round, key.batch, array)
        self.inner.send(key, array)

    def receive(self, key: TensorKey) -> np.ndarray:
        return self.inner.receive(key)

    def cancel_downloads(self) -> None:
        self.inner.cancel_downloads()

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        inner = self.inner.exchange(job_id, round_, batches, up=up, down=down, first=first)
        return _CheckedExchange(inner, self, round_, up)


class _CheckedExchange(FilteredExchange):
    """A round's exchange whose uploads are checked before they are queued; downloads pass through."""

    def __init__(self, inner: TensorExchange, link: CheckedLink, round_: int, up: str) -> None:
        super().__init__(inner)
        self._link, self._round, self._up = link, round_, up

    def upload(self, batch: int, array: np.ndarray) -> np.ndarray:
        check_upload(self._link.party, self._link.job, self._up, self._round, batch, array)
        return array
