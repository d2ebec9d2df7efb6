"""Work the active party hands a passive party, as plain dataclasses.

The server pushes these down each party's Subscribe stream; the party answers with its own
calls. ``vflcore.wire.serde`` converts them to and from protobuf, nothing else sees the proto types.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflcore.job.schedule import Position


@dataclass(frozen=True)
class PsiPlan:
    """How a party takes part in one PSI exchange: the chunking, and where a resumed exchange goes on.

    The active party decides it from what it kept of an interrupted run and what the party said
    at Join it can resume (docs/explanation/psi.md, "Resuming").
    """

    #: IDs per chunk of the exchange, in both directions.
    chunk_ids: int
    #: How many IDs the active party holds (its chunks are cut from that many).
    server_ids: int
    #: Go on with the PSI secret this party kept for this alignment key; False: draw a fresh one.
    resume: bool = False
    #: The first chunk of this party's blinded IDs the active party does not have yet.
    upload_from: int = 0
    #: The first chunk of the active party's blinded IDs this party is still to blind.
    download_from: int = 0


@dataclass(frozen=True)
class Align:
    """Align sample IDs: run PSI (as ``psi`` says), or reuse the alignment saved under ``alignment_key``."""

    task_id: int
    alignment_key: bytes
    run_psi: bool
    #: Set when ``run_psi``: the chunking and the resume point of this party's exchange.
    psi: PsiPlan | None = None


@dataclass(frozen=True)
class TrainEpoch:
    """Run one epoch of the job's algorithm over the shared batch schedule."""

    task_id: int
    epoch: int
    #: A job resumed inside this epoch starts at this batch (0: the whole epoch).
    first_batch: int = 0


@dataclass(frozen=True)
class Evaluate:
    """Send representations of these aligned rows for the end-of-epoch evaluation."""

    task_id: int
    epoch: int
    rows: np.ndarray


@dataclass(frozen=True)
class Infer:
    """Send representations of these aligned rows for an inference request."""

    task_id: int
    request_id: str
    rows: np.ndarray


@dataclass(frozen=True)
class Finish:
    """The job is over (or aborted); the party leaves (its checkpoints were written per epoch)."""

    task_id: int
    success: bool
    message: str
    #: The job only pauses: a party was lost, and the job is offered again to resume from the
    #: newest checkpoint every party holds. A daemon asks NextJob and joins it again.
    rejoin: bool = False


@dataclass(frozen=True)
class Share:
    """Upload one named tensor of this party's trained model (VIMADMM-J: its head W_k, for client importance).

    On the wire this is the ShareHead task, and the upload travels on the RPC its name calls for
    (``vflcore.wire.names.upload_rpc``: FetchHead for the head).
    """

    task_id: int
    round: int
    name: str = "head"


@dataclass(frozen=True)
class Checkpoint:
    """Save this party's training state as the checkpoint of ``position``; every party saves the same.

    Sent at every epoch's end, and inside an epoch only where the active party trains alone
    (``ServerAlgorithm.parties_in_step``): elsewhere each party saves those by itself.
    """

    task_id: int
    position: Position
    #: With ``[job] validation_fraction``: the best position so far by the validation loss. Every
    #: party keeps its checkpoint beyond ``keep_checkpoints`` (``vflcore.data.checkpoints.pin``).
    best: Position | None = None


@dataclass(frozen=True)
class Restore:
    """Continue from the checkpoint of ``position`` (the newest every party holds) and delete newer ones.

    ``Position(0, 0)`` starts afresh: every checkpoint this party holds for the job is deleted, so
    that a job id used again never resumes from an older run's files.
    """

    task_id: int
    position: Position
    #: Training is over and ``position`` is the best epoch's (``[job] validation_fraction``): load
    #: it as the trained model, keep the newer checkpoints, and export it.
    serve: bool = False


@dataclass(frozen=True, eq=False)  # eq=False: comparing numpy arrays field by field is ambiguous
class HoldOut:
    """The test rows the active party's dataset names (``held_out_ids``); every other aligned row trains.

    Sent after alignment, before any training, whenever the job (re)starts: without it every
    party draws the same test rows from the job's seed (``vflcore.job.schedule.Schedule``).
    """

    task_id: int
    #: Sorted positions among the aligned rows.
    rows: np.ndarray


Task = Align | HoldOut | TrainEpoch | Checkpoint | Restore | Evaluate | Infer | Share | Finish
