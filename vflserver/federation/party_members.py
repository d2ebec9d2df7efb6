"""What the active party knows of each passive party of a job, and of each tensor it expects.

Kept apart from ``membership`` (which keeps these records, and the lock the other parts of
``PassiveParties`` change them under) so that the records themselves can be read on their own:
plain dataclasses, no locking, no behaviour.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Protocol

from vflcore.job.schedule import Position
from vflcore.work_items import Task


class RejoinCheck(Protocol):
    """What a served model asks of a party that reconnects (``vflserver.training.served_again.terms``).

    Declared on this floor, as inference declares ``TrainedParty``, so that federation never
    imports the floor that keeps a model served.
    """

    def refusal(
        self,
        job_id: str,
        party: int,
        trained_digest: bytes,
        id_set_digest: bytes,
        cached_alignments: frozenset[bytes],
        held: tuple[Position, ...],
    ) -> str | None:
        """Why ``party`` cannot come back into the served model; None if it can."""


@dataclass
class Member:
    party: int
    joined: bool = False
    online: bool = False
    offline_since: float | None = None
    failure: str | None = None
    #: Why the party counts as gone although its stream may look open (it restarted, say).
    lost: str | None = None
    #: When that loss happened (``time.monotonic()``): its stream's close if that came first.
    lost_at: float | None = None
    #: When the server last heard from it: Join, Subscribe or a Heartbeat.
    last_seen: float = 0.0
    #: How long it had been silent when its stream closed: the network's timeout shows here.
    silent_at_close: float = 0.0
    #: Whether the server sent it ``Finish``: its stream's close is then the job's routine end.
    released: bool = False
    #: Which Subscribe stream is its current one: a stream that closes late must not count.
    session: int = 0
    #: The positions of this job whose checkpoints it can read, as it said at Join.
    checkpoints: tuple[Position, ...] = ()
    id_count: int = 0
    id_set_digest: bytes = b""
    cached_alignments: frozenset[bytes] = frozenset()
    #: Alignment keys of the PSI exchanges it can resume (it kept their secrets), as it said at Join.
    resumable_psi: frozenset[bytes] = frozenset()
    tasks: queue.Queue[Task] = field(default_factory=queue.Queue)
    #: While a served model readmits it after a reconnect: "joined" (Join done), then "loading"
    #: (asked to load its trained part); None once it answers again, and during training.
    rejoin: str | None = None
    #: Why its rejoin was refused (other data, no checkpoint): it is not offered the model again.
    refused: str | None = None


@dataclass(frozen=True)
class Expectation:
    shape: tuple[int, ...]
    dtype: str = "float32"
