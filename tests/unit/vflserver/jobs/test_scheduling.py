"""The queue's rule: which job starts, which wait and for whom, and when a wait ends in failure."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vflcore.data.tables import PartyTable
from vflcore.errors import PartyLost, PartyUnavailable
from vflcore.job.spec import JobSpec
from vflcore.runtime.config import ServerConfig, ServerSettings
from vflcore.work_items import Finish
from vflserver.federation.board import JobBoard
from vflserver.federation.passive_parties import PassiveParties
from vflserver.federation.presence import PartyPresence
from vflserver.jobs.job_queue import ParkedJob
from vflserver.jobs.runner import JobRunner
from vflserver.jobs.scheduling import Candidate, absent_since, loss_deadline, next_turn, waiting_message
from vflserver.jobs.store import JobStore
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestNextTurn:
    def test_the_oldest_job_whose_parties_are_connected_starts(self) -> None:
        """A job that needs the missing party keeps its place; a younger one that does not starts."""
        candidates = [Candidate("parked", (2, 3)), Candidate("needs-3", (2, 3)), Candidate("only-2", (2,))]
        turn = next_turn(candidates, lambda party: party == 2)
        assert turn.start == Candidate("only-2", (2,))
        assert turn.held == {"parked": (3,), "needs-3": (3,)}

    def test_submission_order_among_jobs_that_can_start(self) -> None:
        """With every party connected the oldest starts, whatever the others need."""
        candidates = [Candidate("a", (2, 3)), Candidate("b", (2,)), Candidate("c", ())]
        assert next_turn(candidates, lambda party: True).start == Candidate("a", (2, 3))

    def test_nothing_starts_while_every_job_misses_a_party(self) -> None:
        """Each held job is listed with every party it lacks."""
        turn = next_turn([Candidate("a", (2, 3, 4))], lambda party: party == 2)
        assert turn.start is None and turn.held == {"a": (3, 4)}

    def test_the_message_names_the_parties(self) -> None:
        assert waiting_message([3]).startswith("party 3 is not connected; the job starts once it is")
        assert waiting_message([3, 4]).startswith("parties [3, 4] are not connected")


class TestLimits:
    def test_party_timeout_counts_from_the_loss_not_from_its_detection(self) -> None:
        """A stream that closed at 10.0 and was noticed 5 s later: a 120 s limit ends at 130.0, not 135.0."""
        lost = PartyLost(3, "its connection to the server closed", since=10.0)
        assert loss_deadline(lost, 120.0, noticed_at=15.0) == 130.0

    def test_a_loss_of_unknown_time_counts_from_its_detection(self) -> None:
        assert loss_deadline(PartyLost(3, "gone"), 120.0, noticed_at=15.0) == 135.0

    def test_a_queued_job_waits_for_a_party_since_it_was_queued_or_last_seen(self) -> None:
        """Whichever is later: a party seen after the job was queued restarts the count."""
        assert absent_since(50.0, None) == 50.0
        assert absent_since(50.0, 40.0) == 50.0
        assert absent_since(50.0, 70.0) == 70.0


class TestPresence:
    def test_a_polling_party_is_connected_and_stays_so_for_the_linger(self) -> None:
        """Connected during NextJob, for ``linger_s`` after it, and not after that."""
        clock = _Clock()
        presence = PartyPresence(linger_s=3.0, clock=clock)
        assert not presence.connected(2) and presence.last_seen(2) is None
        with presence.polling(2):
            clock.now += 50
            assert presence.connected(2) and presence.last_seen(2) == clock.now
        clock.now += 3.0
        assert presence.connected(2)
        clock.now += 0.5
        assert not presence.connected(2) and presence.last_seen(2) == 150.0

    def test_an_arrival_wakes_the_listener(self) -> None:
        """The runner hears of a daemon that connects without waiting for its next look at the queue."""
        presence = PartyPresence()
        woken = threading.Event()
        presence.on_arrival(woken.set)
        with presence.polling(3):
            assert woken.is_set()

    def test_a_party_online_in_the_open_job_is_connected(self) -> None:
        """It is not polling NextJob while it takes part; the board counts it through the job."""
        clock = _Clock()
        board = JobBoard(PartyPresence(clock=clock))
        parties = PassiveParties(JobSpec("j", passive_parties=(2, 3)))
        board.open(parties, {})
        parties.join(2, b"", 10, frozenset())
        parties.liveness.subscribe(2)
        assert board.connected(2) and not board.connected(3)
        board.close(parties)
        assert board.connected(2)  # while it comes back to NextJob
        clock.now += 10
        assert not board.connected(2)


def _table(tmp_path: Path, rows: int = 20) -> PartyTable:
    labels = (np.arange(rows) % 2).astype(np.float64)
    ids = np.array([f"u{i}" for i in range(rows)])
    return PartyTable(ids, np.zeros((rows, 2), np.float32), ("a", "b"), labels, tmp_path / "party1.csv")


class TestOneMessage:
    def test_every_party_reads_the_words_the_job_store_keeps(self, tmp_path: Path) -> None:
        """A resumed job whose lost party is late: the configured limit, in the same sentence for all.

        The job's error is ``str`` of the exception; each party's Finish quotes it whole. It says
        120 s, the configured limit counted from the loss, not what was left of it when the wait began.
        """
        settings = ServerSettings(run_dir=tmp_path / "runs", party_timeout_s=120)
        store = JobStore(tmp_path / "jobs.sqlite")
        try:
            runner = JobRunner(store, JobBoard(), ServerConfig(tls=None, datasets={}, settings=settings))
            job = JobSpec("j", algorithm="splitnn", passive_parties=(3,))
            lost = PartyLost(3, "its connection to the server closed", since=time.monotonic() - 200)
            parked = ParkedJob(JobPlan(job, {}, join_timeout_s=60), _table(tmp_path), lost, lost.since + 120)
            active = ActiveParty(JobPlan(job), _table(tmp_path), settings)
            with pytest.raises(PartyUnavailable) as failed:
                active.run(join_timeout_s=0.01, late=runner._late_rejoin("j", parked, 0.01))
        finally:
            store.close()
        error = str(failed.value)
        assert error.startswith("party 3 is unavailable: it did not come back within 120 s ([server] party_timeout_s")
        finish = active.parties.members.member(3).tasks.get_nowait()
        assert isinstance(finish, Finish) and finish.message == f"the active party stopped the job: {error}"


def _store_with(tmp_path: Path, *jobs: tuple[str, list[int], float]) -> JobStore:
    """A store holding queued jobs (id, passive parties, join_timeout_s) in that order."""
    store = JobStore(tmp_path / "jobs.sqlite")
    for job_id, parties, join_timeout_s in jobs:
        document = {"job": {"job_id": job_id, "algorithm": "splitnn", "passive_parties": parties}}
        document["job"]["join_timeout_s"] = join_timeout_s
        store.submit(job_id, document, algorithm="splitnn", epochs=1, submitter="alice")
    return store


def _parked(tmp_path: Path, job_id: str, deadline: float) -> ParkedJob:
    job = JobSpec(job_id, algorithm="splitnn", passive_parties=(3,))
    lost = PartyLost(3, "its connection to the server closed", since=deadline - 120)
    return ParkedJob(JobPlan(job, {}, join_timeout_s=60), _table(tmp_path), lost, deadline)


@contextlib.contextmanager
def _parked_runner(tmp_path: Path, deadline: float, **settings: Any) -> Iterator[tuple[JobStore, JobRunner]]:
    """A runner whose job "paused" lost party 3 while aligning and is parked until ``deadline``."""
    config = ServerConfig(tls=None, datasets={}, settings=ServerSettings(run_dir=tmp_path / "runs", **settings))
    store = _store_with(tmp_path, ("paused", [3], 60))
    try:
        runner = JobRunner(store, JobBoard(), config)
        store.set_state("paused", "aligning")
        store.set_state("paused", "waiting", "waiting for party 3")
        runner.queue.park("paused", _parked(tmp_path, "paused", deadline))
        yield store, runner
    finally:
        store.close()


class TestJobQueue:
    def test_a_parked_job_past_its_deadline_fails_with_the_one_wording(self, tmp_path: Path) -> None:
        """The time keeper fails it, naming the party, the limit as configured and the last checkpoint."""
        with _parked_runner(tmp_path, time.monotonic() - 1, party_timeout_s=120) as (store, runner):
            assert runner.queue.expire() == ["paused"]
            record = store.get("paused")
        assert record.state == "failed"
        assert record.error.startswith("party 3 is unavailable: it did not come back within 120 s")
        assert "no checkpoint has been saved yet" in record.error

    def test_a_parked_job_is_cancelled_at_once(self, tmp_path: Path) -> None:
        """It holds no runner to stop: the cancel ends it there and then."""
        with _parked_runner(tmp_path, time.monotonic() + 600) as (_, runner):
            record = runner.cancel("paused", "alice")
            assert runner.queue.expire() == []
        assert (record.state, record.error) == ("cancelled", "cancelled by alice")

    def test_a_parked_job_is_interrupted_when_the_server_stops(self, tmp_path: Path) -> None:
        """As a running job is: the next start queues it again, to resume from its checkpoints."""
        with _parked_runner(tmp_path, time.monotonic() + 600) as (store, runner):
            runner._interrupt_parked()
            record = store.get("paused")
        assert (record.state, record.error) == ("interrupted", "the server stopped during waiting after 0 of 1 epochs")

    def test_a_queued_job_says_whom_it_waits_for_then_fails_for_them(self, tmp_path: Path) -> None:
        """First its message names party 4; after its join limit without party 4, it fails naming it."""
        settings = ServerSettings(run_dir=tmp_path / "runs")
        store = _store_with(tmp_path, ("needs-4", [4], 0.01))
        try:
            runner = JobRunner(store, JobBoard(), ServerConfig(tls=None, datasets={}, settings=settings))
            assert runner.queue.expire() == []
            assert store.get("needs-4").state == "queued"
            time.sleep(0.05)  # past its 0.01 s limit (not a timing assertion: the order of events is)
            assert runner.queue.expire() == ["needs-4"]
            events = [(e.state, e.message) for e in store.events("needs-4")]
        finally:
            store.close()
        assert [state for state, _ in events] == ["queued", "queued", "failed"]
        assert events[1][1].startswith("party 4 is not connected")
        assert events[2][1].startswith("party 4 is unavailable: its daemon was not connected to the server for 0.01 s")

    def test_the_runner_takes_the_job_whose_parties_are_connected(self, tmp_path: Path) -> None:
        """Party 3 is away: the older job that needs it waits, the younger one for party 2 alone is taken."""
        clock = _Clock()
        board = JobBoard(PartyPresence(clock=clock))
        settings = ServerSettings(run_dir=tmp_path / "runs")
        store = _store_with(tmp_path, ("needs-3", [2, 3], 60), ("only-2", [2], 60))
        try:
            runner = JobRunner(store, board, ServerConfig(tls=None, datasets={}, settings=settings))
            board.presence.seen(2)
            with runner._lock:
                picked = runner.queue.next_job()
            assert picked is not None and picked[0].job_id == "only-2" and picked[1] is None
            board.presence.seen(3)
            with runner._lock:
                picked = runner.queue.next_job()
            assert picked is not None and picked[0].job_id == "needs-3"
        finally:
            store.close()
