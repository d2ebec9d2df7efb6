"""The active party's view of the passive parties: who joined, who is online, what is in flight.

Handlers call in here from gRPC threads; the training loop calls in from its own thread. Every
upload is checked against what the loop said it expects (key and shape) before it is stored, so
a malformed or unexpected tensor is refused without touching any training state.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable

import numpy as np
import structlog

from vflalgorithms.divergence import nonfinite
from vflcore.absence import did_not_join
from vflcore.errors import JobAborted, JoinRejected, PartyLost, PartyUnavailable, TrainingDiverged, VflError
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.wire.codecs import FP32, WireCodec, job_codecs
from vflcore.wire.tensors import TensorError, TensorKey
from vflcore.wire.traffic import Traffic
from vflcore.work_items import Finish, Task
from vflserver.federation.mailbox import Mailbox
from vflserver.federation.party_members import Expectation, Member, RejoinCheck

log = structlog.get_logger(__name__)

# A party whose Subscribe stream closed gets this long to reconnect before a waiting step fails.
OFFLINE_GRACE_S = 5.0


class PassiveParties:
    """Membership, task dispatch and tensor exchange with every passive party of one job."""

    def __init__(
        self,
        job: JobSpec,
        *,
        step_timeout_s: float = 300.0,
        offline_grace_s: float = OFFLINE_GRACE_S,
        psi_timeout_s: float = 3600.0,
        heartbeat_timeout_s: float | None = None,
    ) -> None:
        self.job = job
        #: A party silent for longer is lost even if its stream has not closed (None: never).
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.psi_timeout_s = psi_timeout_s
        self.offline_grace_s = offline_grace_s
        self.step_timeout_s = step_timeout_s
        self.state = "waiting"
        self.uploads = Mailbox()
        #: Bytes exchanged with each party, per phase (``vflcore.wire.traffic``).
        self.traffic = Traffic()
        #: PSI's streams as they go: stream ("own", "back-2", "from-2", ...) -> (chunks done, of how
        #: many), for the operator's console. Counts only, written by the exchange's threads.
        self.psi_progress: dict[str, tuple[int, int]] = {}
        self.downloads = Mailbox()
        #: The job's wire codecs (``[job] wire_codec``): what a step's uploads may come in, and its answers go in.
        self.wire_up, self.wire_down = job_codecs(job)
        #: Published tensors that go out exactly as float32 whatever the down codec (``publish(exact=True)``).
        self._exact: set[tuple[int, TensorKey]] = set()
        self._lock = threading.Lock()
        self._members = {p: Member(p) for p in job.passive_parties}
        self._expected: dict[tuple[int, str, int, int], Expectation] = {}
        self._task_ids = itertools.count(1)
        self._everyone_ready = threading.Condition(self._lock)
        #: Set while the job's model is served (``accept_rejoins``): a party that reconnects may join again.
        self.rejoin_terms: RejoinCheck | None = None

    # ---- membership -------------------------------------------------------------------------

    def member(self, party: int) -> Member:
        try:
            return self._members[party]
        except KeyError:
            raise JoinRejected(
                f"party {party} is not part of job {self.job.job_id!r}; "
                f"it expects parties {list(self.job.passive_parties)}"
            ) from None

    def join(
        self,
        party: int,
        id_set_digest: bytes,
        id_count: int,
        cached_alignments: frozenset[bytes],
        checkpoints: tuple[Position, ...] = (),
        resumable_psi: frozenset[bytes] = frozenset(),
    ) -> JobSpec:
        """Admit a party before the job starts; what it holds is settled by PSI afterwards.

        While the job's model is served, a party that reconnected joins again (``_rejoin``).
        """
        member = self.member(party)
        if self.state == "serving" and self.rejoin_terms is not None:
            return self._rejoin(member, id_set_digest, cached_alignments, tuple(sorted(checkpoints)))
        if self.state != "waiting":
            raise JoinRejected(f"job {self.job.job_id!r} is already {self.state}; party {party} joined too late")
        if id_count < 1:
            raise JoinRejected(f"party {party} has no rows; check its data file")
        with self._lock:
            member.joined = True
            member.id_count, member.id_set_digest = id_count, id_set_digest
            member.cached_alignments = cached_alignments
            member.resumable_psi = resumable_psi
            member.checkpoints = tuple(sorted(checkpoints))
            member.last_seen = time.monotonic()
        log.info("party_joined", peer=party, ids=id_count, checkpoints=[str(p) for p in member.checkpoints])
        return self.job

    def _rejoin(
        self, member: Member, id_set_digest: bytes, cached_alignments: frozenset[bytes], held: tuple[Position, ...]
    ) -> JobSpec:
        """Take back a party into the served model, if it still holds what it trained with.

        A refusal is kept (``refused``): offering the model again would only repeat it.
        """
        terms, party, job_id = self.rejoin_terms, member.party, self.job.job_id
        assert terms is not None
        with self._lock:
            if member.joined and member.online:
                raise JoinRejected(
                    f"party {party} is still connected to the served model of job {job_id!r}; a party holds one "
                    "connection (is a second vfl-client running with this certificate?)"
                )
            refused = terms.refusal(job_id, party, member.id_set_digest, id_set_digest, cached_alignments, held)
            if refused is None:
                member.joined, member.online, member.rejoin = True, False, "joined"
                member.lost = member.failure = member.refused = None
                member.session += 1  # an old stream that closes late must not count
                member.tasks = queue.Queue()  # nothing queued for the old session is meant for this one
                member.checkpoints, member.last_seen = held, time.monotonic()
        if refused is not None:
            self.refuse_rejoin(party, refused)
            raise JoinRejected(refused)
        log.info("party_rejoined", peer=party)
        return self.job

    def accept_rejoins(self, terms: RejoinCheck) -> None:
        """From now on the job's model is served: a party that reconnects may join again on ``terms``."""
        self.rejoin_terms = terms

    def forget_session(self, party: int, reason: str) -> None:
        """``party`` lost its session with the served model (it asked NextJob): offer it the job to join again."""
        member = self.member(party)
        with self._lock:
            if not member.joined:
                return
            member.joined = member.online = False
            member.offline_since = member.offline_since or time.monotonic()
            member.lost, member.rejoin, member.failure = reason, None, None
            member.session += 1
        log.warning("party_session_lost", peer=party, reason=reason)

    def next_rejoined(self, timeout_s: float, stopped: Callable[[], bool] = lambda: False) -> int | None:
        """A party that joined the served model again and subscribed, now marked "loading".

        None after ``timeout_s``, or at once when ``stopped()`` turns true and ``wake_waiters`` is called.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not stopped():
                found = next((m for m in self._members.values() if m.rejoin == "joined" and m.online), None)
                if found is not None:
                    found.rejoin = "loading"
                    return found.party
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._everyone_ready.wait(remaining)
            return None

    def wake_waiters(self) -> None:
        """Wake every thread waiting on the parties' state, to look again (a waiter told to stop)."""
        with self._lock:
            self._everyone_ready.notify_all()

    def refuse_rejoin(self, party: int, reason: str) -> None:
        """``party`` cannot come back into the served model (``reason``): it is not offered it again."""
        member = self.member(party)
        with self._lock:
            member.refused, member.rejoin = reason, None
        log.error("party_rejoin_refused", peer=party, reason=reason)

    def readmitted(self, party: int) -> None:
        """``party`` was told to load its trained part: requests may ask it again."""
        member = self.member(party)
        with self._lock:
            member.rejoin = None
        log.info("party_readmitted", peer=party)

    def absence(self, party: int) -> str | None:
        """Why ``party`` cannot answer for a served model now, in words; None if it can."""
        member = self.member(party)
        if member.refused is not None:
            return f"it reconnected but cannot rejoin: {member.refused}"
        if member.failure is not None:
            return f"it reported a failure: {member.failure}"
        if member.lost is not None:
            return member.lost
        if not member.online:
            if member.rejoin == "joined":
                return "it reconnected and joined again; its task stream is not open yet"
            return "its connection to the server closed; the model serves again once its daemon reconnects"
        if member.rejoin is not None:
            return "it reconnected and is loading its trained part of the model"
        return None

    def subscribe(self, party: int) -> tuple[queue.Queue[Task], int]:
        """Mark a joined party online; its task queue feeds its Subscribe stream, known by the number returned."""
        member = self.member(party)
        if not member.joined:
            raise JoinRejected(f"party {party} must call Join before Subscribe")
        with self._lock:
            if member.online:
                raise JoinRejected(
                    f"party {party} already has a Subscribe stream open for job {self.job.job_id!r}; a party "
                    "holds one (is a second vfl-client running with this certificate?)"
                )
            member.online, member.offline_since = True, None
            member.session += 1
            member.last_seen = time.monotonic()
            session = member.session
            self._everyone_ready.notify_all()
        log.info("party_online", peer=party)
        return member.tasks, session

    def leave(self, party: int, session: int) -> None:
        """The party's Subscribe stream ``session`` closed: it is offline until it subscribes again."""
        member = self.member(party)
        with self._lock:
            if session != member.session:
                return  # an older stream, closed after a newer one opened
            member.online, member.offline_since = False, time.monotonic()
        log.warning("party_offline", peer=party)

    def unjoin(self, party: int) -> None:
        """Forget ``party``'s join before the job started (its daemon restarted), so it can join again."""
        member = self.member(party)
        with self._lock:
            member.joined = member.online = False
            member.session += 1  # the old stream's late close must not count
        log.warning("party_rejoining", peer=party)

    def heartbeat(self, party: int) -> None:
        """A sign of life from ``party``."""
        member = self.member(party)
        with self._lock:
            member.last_seen = time.monotonic()

    def lose(self, party: int, reason: str) -> None:
        """``party`` is gone though its stream may look open (its daemon restarted): waits on it fail now."""
        member = self.member(party)
        with self._lock:
            if member.lost is None:
                now = time.monotonic()
                member.lost = reason
                member.lost_at = now if member.online or member.offline_since is None else member.offline_since
        log.warning("party_lost", peer=party, reason=reason)

    def report_failure(self, party: int, message: str) -> None:
        """A party says its side of a task failed; waits on it end with that message."""
        member = self.member(party)
        member.failure = message
        log.error("party_failed", peer=party, reason=message)

    def wait_until_ready(
        self, timeout_s: float, stop: threading.Event, *, late: Callable[[list[int]], Exception] | None = None
    ) -> None:
        """Block until every passive party has joined and subscribed.

        After ``timeout_s``, raise ``late(missing)``: by default ``vflcore.absence.did_not_join``,
        the wording the job's error and every party's ``Finish`` share.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not all(m.joined and m.online for m in self._members.values()):
                if stop.is_set():
                    raise JobAborted("shutdown requested while waiting for parties")
                failed = [m for m in self._members.values() if m.failure is not None]
                if failed:  # e.g. it has no dataset of the name the job gives it
                    raise PartyUnavailable(failed[0].party, f"it cannot take part: {failed[0].failure}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = [p for p, m in self._members.items() if not (m.joined and m.online)]
                    raise (late or (lambda absent: did_not_join(absent, timeout_s)))(missing)
                self._everyone_ready.wait(min(0.5, remaining))

    def check_online(self, party: int) -> None:
        """Raise if waiting any longer on this party is hopeless.

        A party that reported a failure is PartyUnavailable: it will fail the same way again. A
        party whose stream closed, that went silent or that restarted is PartyLost: it may come
        back, and the service resumes the job from a checkpoint when it does. The PartyLost says
        when the loss happened (``since``): the stream's close, or the last sign of life, not now.
        """
        member = self.member(party)
        if member.failure is not None:
            raise self._failed(party, member.failure)
        if member.lost is not None:
            raise PartyLost(party, member.lost, since=member.lost_at)
        if member.rejoin is not None or member.refused is not None:  # coming back into a served model
            raise PartyLost(party, self.absence(party) or "it is rejoining", since=member.lost_at)
        now = time.monotonic()
        if not member.online:
            since = member.offline_since or now
            if now - since >= self.offline_grace_s:
                raise PartyLost(party, "its connection to the server closed", since=since)
        elif self.heartbeat_timeout_s is not None and now - member.last_seen > self.heartbeat_timeout_s:
            silent = now - member.last_seen
            raise PartyLost(
                party, f"no heartbeat for {silent:.0f} s ([server] heartbeat_timeout_s)", since=member.last_seen
            )

    def _failed(self, party: int, failure: str) -> VflError:
        """A reported failure as PartyUnavailable, or as TrainingDiverged (a NaN upload refused while training too)."""
        if failure.startswith(f"{TrainingDiverged.__name__}: "):
            return TrainingDiverged("", message=failure.removeprefix(f"{TrainingDiverged.__name__}: "))
        if self.state == "training" and failure.startswith("TensorRejected: ") and "NaN or infinite" in failure:
            refused = failure.removeprefix("TensorRejected: ")
            return TrainingDiverged(f"party {party} sent NaN or infinite values, which the server refused ({refused})")
        return PartyUnavailable(party, f"it reported a failure: {failure}")

    def online_parties(self) -> list[int]:
        return [p for p, m in self._members.items() if m.online]

    # ---- work -------------------------------------------------------------------------------

    def dispatch(self, make_task: Callable[[int], Task], *, parties: Iterable[int] | None = None) -> None:
        """Queue the same task (with a fresh id) for every passive party, or only for ``parties``."""
        members = self._members.values() if parties is None else [self.member(p) for p in parties]
        for member in members:
            member.tasks.put(make_task(next(self._task_ids)))

    def finish(self, success: bool, message: str, *, rejoin: bool = False) -> None:
        """Tell every party the job is over (with ``rejoin``: paused); each Subscribe stream ends after this task."""
        self.dispatch(lambda tid: Finish(tid, success, message, rejoin))

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
            for each in [party] if party is not None else list(self._members):
                self._expected[(each, name, round_, batch)] = Expectation(shape, dtype)

    def require_in_this_run(self, party: int) -> None:
        """A tensor call of a party not in this run (not joined, or lost) is of a run that paused: JobAborted.
        ABORTED: the party drops the task and takes the job again (NextJob). As INVALID_ARGUMENT it failed
        the resumed job (its failure report); a download left waiting held it away until party_timeout_s.
        """
        member = self._members.get(party)
        if member is not None and (not member.joined or member.lost is not None):
            raise JobAborted(
                f"party {party} has not joined this run of job {self.job.job_id!r} (it was away when the job "
                "paused, or has not joined yet): its daemon takes the job again (NextJob) and resumes it"
            )

    def check_announced(self, party: int, key: TensorKey, dtype: str, shape: tuple[int, ...]) -> None:
        """Refuse an upload whose key, dtype or shape is not what the loop waits for, naming the field.

        Called on a tensor's first chunk, before anything is buffered (``TensorAssembler``), and
        again on the whole tensor (``accept_upload``).
        """
        if key.job_id != self.job.job_id:
            raise TensorError("key.job_id", f"{key.job_id!r} is not the running job {self.job.job_id!r}")
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

    def accept_upload(self, party: int, key: TensorKey, array: np.ndarray) -> None:
        """Validate an uploaded tensor against the expectation; store it only if it fits."""
        self.check_announced(party, key, array.dtype.name, tuple(array.shape))
        self.uploads.put(party, key, array)

    def gather(self, name: str, round_: int, batch: int, *, timeout_s: float | None = None) -> dict[int, np.ndarray]:
        """Wait for one upload from every party; each expectation is retired once it is taken.

        While waiting for one party, every party's liveness is checked: the step needs them all,
        so a party that vanished fails it at once, by name, not after the others have answered.
        """
        parties = list(self._members)
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
        key = TensorKey(self.job.job_id, round_, batch, name)
        watched = watch or [party]

        def check() -> None:
            if stop is not None and stop.is_set():
                raise JobAborted(f"stopped waiting for {key} from party {party}: another part of the exchange failed")
            for each in watched:
                self.check_online(each)

        array = self.uploads.take(party, key, timeout=timeout_s or self.step_timeout_s, check=check)
        with self._lock:
            self._expected.pop((party, name, round_, batch), None)
        return array

    def next_arrival(self, name: str, round_: int, *, timeout_s: float | None = None) -> tuple[int, int, np.ndarray]:
        """(party, batch, tensor) of the earliest upload named ``name`` in ``round_``, from any party.

        For asynchronous training: the server takes whatever arrives first. A party that went
        away still fails the wait, as in ``gather``.
        """
        job_id = self.job.job_id

        def match(party: int, key: TensorKey) -> bool:
            return key.job_id == job_id and key.name == name and key.round == round_

        def check() -> None:
            for party in self._members:
                self.check_online(party)

        party, key, array = self.uploads.take_first(match, timeout=timeout_s or self.step_timeout_s, check=check)
        with self._lock:
            self._expected.pop((party, name, round_, key.batch), None)
        return party, key.batch, array

    def forget(self, name: str, round_: int, batch: int) -> None:
        """Retire an exchange that failed: its expectation and anything already uploaded for it."""
        key = TensorKey(self.job.job_id, round_, batch, name)
        with self._lock:
            for party in self._members:
                self._expected.pop((party, name, round_, batch), None)
        for party in self._members:
            self.uploads.discard(party, key)

    def publish(self, party: int, key: TensorKey, array: np.ndarray, *, exact: bool = False) -> None:
        """Leave a tensor for a party to collect (a gradient, say), sent in the job's down codec.

        ``exact``: sent as float32 whatever the codec (weights broadcast once, not a step's answer).
        A NaN or infinite value is never sent (TrainingDiverged): training ran away.
        """
        bad = nonfinite(array)
        if bad is not None:
            raise TrainingDiverged(f"the active party's {key.name} for party {party} is not finite ({bad}); not sent")
        if exact:
            with self._lock:
                self._exact.add((party, key))
        self.downloads.put(party, key, array)

    def download_codec(self, party: int, key: TensorKey) -> WireCodec:
        """The codec a published tensor goes out in: the job's down codec, unless it was published exact."""
        with self._lock:
            if (party, key) in self._exact:
                self._exact.discard((party, key))
                return FP32
        return self.wire_down

    def collect(
        self, party: int, key: TensorKey, *, timeout_s: float | None = None, check: Callable[[], None] = lambda: None
    ) -> np.ndarray:
        """A party's handler waits here for the tensor the loop publishes for it.

        ``check`` raises once the waiting call is gone (the party cancelled it): a call left over
        from an attempt that failed must not take a tensor published for the next one.
        """
        return self.downloads.take(party, key, timeout=timeout_s or self.step_timeout_s, check=check)

    def abort(self, reason: Exception) -> None:
        """Wake every waiter in both directions: the job is over."""
        self.state = "failed"
        self.uploads.abort(reason)
        self.downloads.abort(reason)
