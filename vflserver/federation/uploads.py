"""Tensors the passive parties upload, checked against what the training loop said it expects.

The loop announces each upload (``expect``: name, round, batch, shape, dtype) before it waits
for it. Every upload is checked against that expectation (key and shape) before it is stored,
so a malformed or unexpected tensor is refused without touching any training state; an
expectation is retired once its tensor is taken, so the same tensor sent again is refused.
While the loop waits, it checks that the parties it needs are still there (``Liveness``).
"""

from __future__ import annotations

import threading

import numpy as np

from vflcore.errors import JobAborted
from vflcore.wire.codecs import WireCodec
from vflcore.wire.tensors import TensorError, TensorKey
from vflserver.federation.liveness import Liveness
from vflserver.federation.mailbox import Mailbox
from vflserver.federation.membership import Membership
from vflserver.federation.party_members import Expectation


class Uploads:
    """The expectations the training loop announced, and the uploads that met them."""

    def __init__(self, members: Membership, liveness: Liveness, wire_up: WireCodec, *, step_timeout_s: float) -> None:
        self.members = members
        self.liveness = liveness
        #: The codec a step's uploads may come in besides float32 (``[job] wire_codec``).
        self.wire_up = wire_up
        self.step_timeout_s = step_timeout_s
        #: Uploads that met their expectation, until the loop takes them.
        self.mailbox = Mailbox()
        self._lock = threading.Lock()
        self._expected: dict[tuple[int, str, int, int], Expectation] = {}

    @property
    def _job_id(self) -> str:
        return self.members.job.job_id

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
        """Announce an upload every party (or one ``party``) will make, to validate it on arrival."""
        with self._lock:
            for each in [party] if party is not None else self.members.parties():
                self._expected[(each, name, round_, batch)] = Expectation(shape, dtype)

    def require_in_this_run(self, party: int) -> None:
        """A tensor call of a party not in this run (not joined, or lost) is of a run that paused: JobAborted.
        ABORTED: the party drops the task and takes the job again (NextJob). As INVALID_ARGUMENT it failed
        the resumed job (its failure report); a download left waiting held it away until party_timeout_s.
        """
        member = self.members.get(party)
        if member is not None and (not member.joined or member.lost is not None):
            raise JobAborted(
                f"party {party} has not joined this run of job {self._job_id!r} (it was away when the job "
                "paused, or has not joined yet): its daemon takes the job again (NextJob) and resumes it"
            )

    def check_announced(self, party: int, key: TensorKey, dtype: str, shape: tuple[int, ...]) -> None:
        """Refuse an upload whose key, dtype or shape is not what the loop waits for, naming the field.

        Called on a tensor's first chunk, before anything is buffered (``TensorAssembler``), and
        again on the whole tensor (``accept``).
        """
        if key.job_id != self._job_id:
            raise TensorError("key.job_id", f"{key.job_id!r} is not the running job {self._job_id!r}")
        with self._lock:
            expectation = self._expected.get((party, key.name, key.round, key.batch))
        if expectation is None:
            self.require_in_this_run(party)
            raise TensorError("key", f"the server expects no {key} from party {party} now")
        if dtype != expectation.dtype and not (expectation.dtype == "float32" and dtype == self.wire_up.dtype):
            allowed = expectation.dtype if expectation.dtype != "float32" else f"float32 or {self.wire_up.dtype}"
            raise TensorError("dtype", f"{key} must be {allowed}, got {dtype}")
        if tuple(shape) != tuple(expectation.shape):
            raise TensorError("shape", f"{key} has shape {list(shape)}, expected {list(expectation.shape)}")

    def accept(self, party: int, key: TensorKey, array: np.ndarray) -> None:
        """Validate an uploaded tensor against the expectation; store it only if it fits."""
        self.check_announced(party, key, array.dtype.name, tuple(array.shape))
        self.mailbox.put(party, key, array)

    def gather(self, name: str, round_: int, batch: int, *, timeout_s: float | None = None) -> dict[int, np.ndarray]:
        """Wait for one upload from every party; each expectation is retired once it is taken.

        While waiting for one party, every party's liveness is checked: the step needs them all,
        so a party that vanished fails it at once, by name, not after the others have answered.
        """
        parties = self.members.parties()
        return {
            party: self.gather_from(party, name, round_, batch, timeout_s=timeout_s, watch=parties) for party in parties
        }

    def gather_from(
        self,
        party: int,
        name: str,
        round_: int,
        batch: int,
        *,
        timeout_s: float | None = None,
        watch: list[int] | None = None,
        stop: threading.Event | None = None,
    ) -> np.ndarray:
        """Wait for one party's upload (checking it, or every party in ``watch``, is still there).

        Its expectation is retired once it is taken. ``stop``, once set, ends the wait (JobAborted).
        """
        key = TensorKey(self._job_id, round_, batch, name)
        watched = watch or [party]

        def check() -> None:
            if stop is not None and stop.is_set():
                raise JobAborted(f"stopped waiting for {key} from party {party}: another part of the exchange failed")
            for each in watched:
                self.liveness.check_online(each)

        array = self.mailbox.take(party, key, timeout=timeout_s or self.step_timeout_s, check=check)
        with self._lock:
            self._expected.pop((party, name, round_, batch), None)
        return array

    def next_arrival(self, name: str, round_: int, *, timeout_s: float | None = None) -> tuple[int, int, np.ndarray]:
        """(party, batch, tensor) of the earliest upload named ``name`` in ``round_``, from any party.

        For asynchronous training: the server takes whatever arrives first. A party that went
        away still fails the wait, as in ``gather``.
        """
        job_id = self._job_id

        def match(party: int, key: TensorKey) -> bool:
            return key.job_id == job_id and key.name == name and key.round == round_

        def check() -> None:
            for party in self.members.parties():
                self.liveness.check_online(party)

        party, key, array = self.mailbox.take_first(match, timeout=timeout_s or self.step_timeout_s, check=check)
        with self._lock:
            self._expected.pop((party, name, round_, key.batch), None)
        return party, key.batch, array

    def forget(self, name: str, round_: int, batch: int) -> None:
        """Retire an exchange that failed: its expectation and anything already uploaded for it."""
        key = TensorKey(self._job_id, round_, batch, name)
        parties = self.members.parties()
        with self._lock:
            for party in parties:
                self._expected.pop((party, name, round_, batch), None)
        for party in parties:
            self.mailbox.discard(party, key)
