"""The active party's checkpoints: save one, and roll every party back to the newest one they all hold.

At an epoch's end the active party saves first and then tells the passive parties to save theirs
(``Checkpoint``), so a passive party never holds an epoch the active party lacks. Inside an epoch
(``[job] checkpoint_every_steps``) every party saves at the same steps by itself. A resumed job
goes on from the newest position every party holds (``roll_back``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from vflalgorithms.divergence import nonfinite_state
from vflalgorithms.halves import ServerAlgorithm
from vflcore.data.checkpoints import discard_after, load_position, pin, readable_checkpoints, save_position
from vflcore.errors import CheckpointError, TrainingDiverged
from vflcore.job.schedule import Position
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.state import restore_rng, rng_state
from vflcore.work_items import Restore
from vflserver.federation.passive_parties import PassiveParties
from vflserver.training.reports import EpochReport

log = structlog.get_logger(__name__)


def save_checkpoint(
    run_dir: Path,
    position: Position,
    algorithm: ServerAlgorithm,
    reports: Sequence[EpochReport],
    *,
    keep: int,
    extra: Mapping[str, Any] | None = None,
    best: Position | None = None,
) -> None:
    """Save the active party's state, with the epoch reports so far, as the checkpoint of ``position``.

    ``extra`` is kept beside them (the distilled student's: the digest of the outputs it learns from).
    ``best`` is the best position so far by validation, whose checkpoint is kept (``checkpoints.pin``).
    A state with a NaN or infinite value is not saved (TrainingDiverged): the newest checkpoint on
    disk stays the newest finite one.
    """
    own = algorithm.state()
    bad = nonfinite_state(own)
    if bad is not None:
        raise TrainingDiverged(f"the active party's model is not finite ({bad}), so {position} was not saved")
    state = {
        "algorithm": own,
        "rng": rng_state(),
        "reports": [report.plain() for report in reports],
        **(extra or {}),
    }
    if best is not None:
        pin(run_dir, best)
    save_position(run_dir, position, state, keep=keep)


def load_newest(
    run_dir: Path,
    positions: Iterable[Position],
    algorithm: ServerAlgorithm,
    *,
    fits: Callable[[Mapping[str, Any]], bool] = lambda state: True,
) -> tuple[Position, list[EpochReport]] | None:
    """Load the newest of ``positions`` whose checkpoint reads and ``fits``: into ``algorithm`` and the RNGs.

    Returns its position and epoch reports; None if none of them will do. A damaged file, or one
    that does not fit, is logged and skipped for an older one.
    """
    for position in sorted(positions, reverse=True):
        try:
            state = load_position(run_dir, position)
        except CheckpointError as exc:  # damaged since it was listed: an older one will do
            log.warning("checkpoint_unreadable", position=str(position), error=str(exc))
            continue
        if not fits(state):
            log.warning("checkpoint_skipped", position=str(position), path=str(run_dir))
            continue
        algorithm.load_state(state["algorithm"])
        restore_rng(state["rng"])
        return position, [EpochReport(**report) for report in state["reports"]]
    return None


def roll_back(
    run_dir: Path, job: JobSpec, parties: PassiveParties, algorithm: ServerAlgorithm, *, resume: bool
) -> tuple[Position, list[EpochReport] | None]:
    """Agree on the newest checkpoint every party holds and load it everywhere.

    Returns where training goes on, and the epoch reports the loaded checkpoint holds (None if
    none was loaded). Each passive party said at Join which positions it can read. The active
    party tries the common ones, newest first, and loads its own; then every passive party is
    told to load the same one (``Restore``) and to delete newer ones. With no common checkpoint,
    or without ``resume``, every party starts afresh (``Restore`` of ``Position(0, 0)``), which
    gives the same model.
    """
    end = Position(job.epochs, 0)
    held = {ACTIVE_PARTY: readable_checkpoints(run_dir) if resume else []}
    held |= {party: list(parties.members.member(party).checkpoints) for party in job.passive_parties}
    common = set(held[ACTIVE_PARTY]).intersection(*(set(h) for h in held.values()))
    loaded = load_newest(run_dir, (p for p in common if p <= end), algorithm)
    chosen, reports = loaded if loaded is not None else (Position(0, 0), None)
    discard_after(run_dir, chosen)
    parties.dispatch(lambda tid: Restore(tid, chosen))
    if resume:
        log.info(
            "resumed",
            at=str(chosen),
            epoch=chosen.epoch,
            batch=chosen.batch,
            held={str(party): [str(p) for p in found] for party, found in held.items()},
        )
    return chosen, reports
