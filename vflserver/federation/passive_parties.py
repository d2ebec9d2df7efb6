"""The active party's view of the passive parties of one job, made of one part per job.

Handlers call in here from gRPC threads; the training loop calls in from its own thread. Each
part does one thing, and callers use the part they need:

- ``members`` (``membership.Membership``): who joined, the job's phase, the wait until all are in;
- ``liveness`` (``liveness.Liveness``): Subscribe streams, signs of life, whether a party is lost;
- ``rejoins`` (``rejoins.Rejoins``): parties coming back into a served model;
- ``tasks`` (``dispatch.TaskDispatch``): work queued for each party's Subscribe stream;
- ``uploads`` (``uploads.Uploads``): what the loop expects, and the uploads that met it;
- ``downloads`` (``downloads.Downloads``): tensors published for each party to collect.

``PassiveParties`` itself is what an algorithm's active half is handed
(``vflalgorithms.contexts.PassivePartiesView``): dispatch, expect, gather and publish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.wire.codecs import job_codecs
from vflcore.wire.tensors import TensorKey
from vflcore.wire.traffic import Traffic
from vflcore.work_items import Task
from vflserver.federation.dispatch import TaskDispatch
from vflserver.federation.downloads import Downloads
from vflserver.federation.liveness import OFFLINE_GRACE_S, Liveness
from vflserver.federation.membership import Membership
from vflserver.federation.rejoins import Rejoins
from vflserver.federation.uploads import Uploads


class PassiveParties:
    """Membership, liveness, task dispatch and tensor exchange with every passive party of one job."""

    def __init__(
        self,
        job: JobSpec,
        *,
        step_timeout_s: float = 300.0,
        offline_grace_s: float = OFFLINE_GRACE_S,
        psi_timeout_s: float = 3600.0,
        heartbeat_timeout_s: float | None = None,
    ) -> None:
        self.members = Membership(job)
        self.liveness = Liveness(self.members, offline_grace_s=offline_grace_s, heartbeat_timeout_s=heartbeat_timeout_s)
        self.rejoins = Rejoins(self.members)
        self.tasks = TaskDispatch(self.members)
        wire_up, wire_down = job_codecs(job)
        self.uploads = Uploads(self.members, self.liveness, wire_up, step_timeout_s=step_timeout_s)
        self.downloads = Downloads(wire_down, step_timeout_s=step_timeout_s)
        self.psi_timeout_s = psi_timeout_s
        #: Bytes exchanged with each party, per phase (``vflcore.wire.traffic``).
        self.traffic = Traffic()
        #: PSI's streams as they go: stream ("own", "back-2", "from-2", ...) -> (chunks done, of how
        #: many), for the operator's console. Counts only, written by the exchange's threads.
        self.psi_progress: dict[str, tuple[int, int]] = {}

    @property
    def job(self) -> JobSpec:
        return self.members.job

    @job.setter
    def job(self, job: JobSpec) -> None:
        self.members.job = job

    @property
    def state(self) -> str:
        """The job's phase as the parties see it (``Membership.state``)."""
        return self.members.state

    @state.setter
    def state(self, state: str) -> None:
        self.members.state = state

    def join(
        self,
        party: int,
        id_set_digest: bytes,
        id_count: int,
        cached_alignments: frozenset[bytes],
        checkpoints: tuple[Position, ...] = (),
        resumable_psi: frozenset[bytes] = frozenset(),
    ) -> JobSpec:
        """Admit a party before the job starts, or, while its model is served, take it back (``Rejoins``)."""
        self.members.member(party)
        if self.rejoins.open:
            return self.rejoins.join(party, id_set_digest, cached_alignments, tuple(sorted(checkpoints)))
        return self.members.join(party, id_set_digest, id_count, cached_alignments, checkpoints, resumable_psi)

    # ---- what an algorithm's active half uses (``PassivePartiesView``) -------------------------

    def dispatch(self, make_task: Callable[[int], Task], *, parties: Iterable[int] | None = None) -> None:
        self.tasks.dispatch(make_task, parties=parties)

    def expect(
        self,
        name: str,
        round_: int,
        batch: int,
        shape: tuple[int, ...],
        dtype: str = "float32",
        *,
        party: int | None = None,
    ) -> None:
        self.uploads.expect(name, round_, batch, shape, dtype, party=party)

    def gather(self, name: str, round_: int, batch: int, *, timeout_s: float | None = None) -> dict[int, np.ndarray]:
        return self.uploads.gather(name, round_, batch, timeout_s=timeout_s)

    def next_arrival(self, name: str, round_: int, *, timeout_s: float | None = None) -> tuple[int, int, np.ndarray]:
        return self.uploads.next_arrival(name, round_, timeout_s=timeout_s)

    def forget(self, name: str, round_: int, batch: int) -> None:
        self.uploads.forget(name, round_, batch)

    def publish(self, party: int, key: TensorKey, array: np.ndarray, *, exact: bool = False) -> None:
        self.downloads.publish(party, key, array, exact=exact)

    def abort(self, reason: Exception) -> None:
        """Wake every waiter in both directions: the job is over."""
        self.members.state = "failed"
        self.uploads.mailbox.abort(reason)
        self.downloads.mailbox.abort(reason)
