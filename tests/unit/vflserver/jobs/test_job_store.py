"""Tests for vflserver.jobs.store: the SQLite job store, its state machine, history and migrations."""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vflcore.errors import DuplicateJob, JobNotFound, JobStateError, JobStoreError
from vflserver.jobs import store
from vflserver.jobs.schema import migrate
from vflserver.jobs.store import ENDED, JOB_STATES, EpochRecord, JobStore

DOCUMENT = {"job": {"algorithm": "splitnn", "epochs": 3}, "data": {"id_column": "id"}}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "jobs.sqlite"


@pytest.fixture
def jobs(path: Path) -> Iterator[JobStore]:
    opened = JobStore(path)
    yield opened
    opened.close()


def submit(jobs: JobStore, job_id: str, epochs: int = 3) -> None:
    jobs.submit(job_id, DOCUMENT, algorithm="splitnn", epochs=epochs, submitter="analyst")


def epoch(n: int, loss: float = 0.5) -> EpochRecord:
    return EpochRecord(
        epoch=n, train_loss=loss, test_loss=loss + 0.1, metrics={"accuracy": 0.9}, seconds=1.5, wire_bytes=1000
    )


def to_training(jobs: JobStore, job_id: str) -> None:
    jobs.set_state(job_id, "aligning")
    jobs.set_state(job_id, "training")


class TestJobs:
    def test_submit_then_get(self, jobs: JobStore) -> None:
        """A submitted job is queued with its document, submitter and a submission time, and nothing else set."""
        before = time.time()
        record = jobs.submit("j1", DOCUMENT, algorithm="splitnn", epochs=3, submitter="analyst")
        assert record == jobs.get("j1")
        assert (record.state, record.document, record.algorithm, record.epochs) == ("queued", DOCUMENT, "splitnn", 3)
        assert before <= record.submitted_at <= time.time()
        assert (record.started_at, record.ended_at, record.error, record.epochs_done) == (None, None, "", 0)
        assert (record.final_metrics, record.served, record.submitter) == ({}, False, "analyst")

    def test_submit_records_a_queued_event(self, jobs: JobStore) -> None:
        """Submitting writes event 1, a "queued" state event naming the submitter."""
        submit(jobs, "j1")
        [event] = jobs.events("j1")
        assert (event.seq, event.kind, event.state, event.message) == (1, "state", "queued", "submitted by analyst")

    def test_unknown_job(self, jobs: JobStore) -> None:
        """Every per-job call on an unknown ID raises JobNotFound naming the ID."""
        calls: list[Callable[[], object]] = [
            lambda: jobs.get("nope"),
            lambda: jobs.set_state("nope", "aligning"),
            lambda: jobs.set_served("nope", True),
            lambda: jobs.epochs("nope"),
            lambda: jobs.events("nope"),
            lambda: jobs.wait_for_events("nope", 0, 0.0),
        ]
        for call in calls:
            with pytest.raises(JobNotFound, match="'nope'"):
                call()

    def test_list_newest_first_with_filters(self, jobs: JobStore) -> None:
        """List returns newest submission first, filtered by state and cut at limit."""
        for job_id in ("a", "b", "c", "d"):
            submit(jobs, job_id)
        jobs.set_state("b", "cancelled", "not needed")
        assert [job.job_id for job in jobs.list()] == ["d", "c", "b", "a"]
        assert [job.job_id for job in jobs.list(states=["queued"])] == ["d", "c", "a"]
        assert [job.job_id for job in jobs.list(states={"cancelled", "queued"}, limit=2)] == ["d", "c"]
        assert jobs.list(states=["finished"]) == []

    def test_list_refuses_unknown_state(self, jobs: JobStore) -> None:
        """An unknown state name in a filter is a ValueError that names it."""
        with pytest.raises(ValueError, match="'runing'"):
            jobs.list(states=["queued", "runing"])

    def test_next_queued_is_fifo(self, jobs: JobStore) -> None:
        """The next job is the oldest queued one, whatever its ID, and None once the queue is empty."""
        assert jobs.next_queued() is None
        for job_id in ("z", "a", "m"):
            submit(jobs, job_id)
        order = []
        while (job := jobs.next_queued()) is not None:
            order.append(job.job_id)
            jobs.set_state(job.job_id, "aligning")
        assert order == ["z", "a", "m"]

    def test_requeued_job_keeps_its_place(self, jobs: JobStore) -> None:
        """An interrupted job put back in the queue runs before jobs submitted after it."""
        submit(jobs, "old")
        jobs.set_state("old", "aligning")
        jobs.set_state("old", "interrupted", "stopped")
        submit(jobs, "new")
        jobs.set_state("old", "queued")
        assert jobs.next_queued() == jobs.get("old")

    def test_counts_by_state(self, jobs: JobStore) -> None:
        """Counts name every state, zero where no job is in it."""
        for job_id in ("a", "b", "c"):
            submit(jobs, job_id)
        jobs.set_state("a", "aligning")
        assert jobs.counts_by_state() == dict.fromkeys(JOB_STATES, 0) | {"queued": 2, "aligning": 1}

    def test_set_served(self, jobs: JobStore) -> None:
        """The served flag is stored and read back."""
        submit(jobs, "j1")
        jobs.set_served("j1", True)
        assert jobs.get("j1").served is True
        jobs.set_served("j1", False)
        assert jobs.get("j1").served is False


class TestTransitions:
    @pytest.mark.parametrize(
        "path_",
        [
            ["aligning", "training", "finished"],
            ["aligning", "finished"],
            ["failed"],
            ["cancelled"],
            ["aligning", "cancelled"],
            ["aligning", "training", "failed"],
            ["aligning", "training", "interrupted", "queued", "aligning"],
            ["queued", "queued", "aligning"],
            ["aligning", "waiting", "waiting", "training", "finished"],
        ],
        ids=lambda states: "-".join(states),
    )
    def test_allowed(self, jobs: JobStore, path_: list[str]) -> None:
        """Each allowed path from queued is accepted, and each step becomes a state event."""
        submit(jobs, "j1")
        for state in path_:
            assert jobs.set_state("j1", state, f"to {state}").state == state
        assert [event.state for event in jobs.events("j1")] == ["queued", *path_]

    @pytest.mark.parametrize(
        ("before", "after"),
        [
            ([], "training"),
            ([], "finished"),
            ([], "interrupted"),
            ([], "waiting"),
            (["aligning"], "queued"),
            (["aligning", "training"], "aligning"),
            (["aligning", "training", "finished"], "failed"),
            (["cancelled"], "queued"),
            (["failed"], "queued"),
            (["aligning", "interrupted"], "training"),
        ],
        ids=lambda value: "-".join(value) if isinstance(value, list) else value,
    )
    def test_refused(self, jobs: JobStore, before: list[str], after: str) -> None:
        """A transition outside the state machine raises JobStateError naming both states, and changes nothing."""
        submit(jobs, "j1")
        for state in before:
            jobs.set_state("j1", state)
        current = jobs.get("j1")
        with pytest.raises(JobStateError, match=f"is {current.state} and cannot become {after}"):
            jobs.set_state("j1", after)
        assert jobs.get("j1") == current
        assert len(jobs.events("j1")) == 1 + len(before)

    def test_unknown_state(self, jobs: JobStore) -> None:
        """A state name that does not exist is a ValueError, not a transition error."""
        submit(jobs, "j1")
        with pytest.raises(ValueError, match="'running'"):
            jobs.set_state("j1", "running")

    def test_timestamps_and_error(self, jobs: JobStore) -> None:
        """started_at is set once on aligning, ended_at on ending, error on failing; re-queuing clears both."""
        submit(jobs, "j1")
        jobs.set_state("j1", "aligning")
        started = jobs.get("j1").started_at
        assert started is not None and jobs.get("j1").ended_at is None
        jobs.set_state("j1", "interrupted", "the server stopped")
        interrupted = jobs.get("j1")
        assert interrupted.ended_at is not None and interrupted.error == "the server stopped"
        jobs.set_state("j1", "queued", "resumed")
        jobs.set_state("j1", "aligning")
        resumed = jobs.get("j1")
        assert (resumed.started_at, resumed.ended_at, resumed.error) == (started, None, "")
        jobs.set_state("j1", "failed", "party 2 is unavailable")
        failed = jobs.get("j1")
        assert failed.error == "party 2 is unavailable" and failed.ended_at is not None

    def test_finished_with_metrics(self, jobs: JobStore) -> None:
        """Final metrics go on the job and on the "finished" event; the finished job has no error."""
        submit(jobs, "j1")
        to_training(jobs, "j1")
        event = jobs.set_state("j1", "finished", "done", final_metrics={"accuracy": 0.95, "r2": math.nan})
        job = jobs.get("j1")
        assert job.state in ENDED and job.error == "" and job.ended_at is not None
        assert job.final_metrics["accuracy"] == 0.95 and math.isnan(job.final_metrics["r2"])
        assert event.final_metrics["accuracy"] == 0.95
        assert jobs.events("j1", after_seq=event.seq - 1)[0].final_metrics["accuracy"] == 0.95


class TestEpochs:
    def test_recorded_in_order(self, jobs: JobStore) -> None:
        """Epochs come back in order, as recorded, and epochs_done follows the last one."""
        submit(jobs, "j1")
        to_training(jobs, "j1")
        for n in range(2):
            jobs.record_epoch("j1", epoch(n, loss=1.0 - n / 10))
        assert jobs.epochs("j1") == [epoch(0, 1.0), epoch(1, 0.9)]
        assert jobs.get("j1").epochs_done == 2

    def test_rerun_epoch_replaces_row_and_is_not_a_second_event(self, jobs: JobStore) -> None:
        """An epoch trained again after a resume replaces its row; the history still has one event per epoch."""
        submit(jobs, "j1")
        to_training(jobs, "j1")
        jobs.record_epoch("j1", epoch(0, loss=1.0))
        jobs.record_epoch("j1", epoch(1, loss=0.9))
        jobs.set_state("j1", "waiting", "waiting for party 3")
        jobs.set_state("j1", "training", "resumed")
        assert jobs.record_epoch("j1", epoch(1, loss=0.8)) is None
        jobs.record_epoch("j1", epoch(2, loss=0.7))
        assert jobs.epochs("j1") == [epoch(0, 1.0), epoch(1, 0.8), epoch(2, 0.7)]
        assert jobs.get("j1").epochs_done == 3
        history = jobs.events("j1")
        reported = [event.epoch for event in history if event.kind == "epoch"]
        assert reported == [epoch(0, 1.0), epoch(1, 0.9), epoch(2, 0.7)]
        assert [event.state for event in history if event.kind == "state"][-2:] == ["waiting", "training"]

    def test_nan_loss_round_trips(self, jobs: JobStore) -> None:
        """A NaN loss (a diverged run) is stored and read back as NaN."""
        submit(jobs, "j1")
        to_training(jobs, "j1")
        jobs.record_epoch("j1", epoch(0, loss=math.nan))
        [stored] = jobs.epochs("j1")
        assert math.isnan(stored.train_loss) and math.isnan(stored.test_loss)

    def test_epoch_event(self, jobs: JobStore) -> None:
        """Recording an epoch appends an "epoch" event carrying the record, the job still training."""
        submit(jobs, "j1")
        to_training(jobs, "j1")
        event = jobs.record_epoch("j1", epoch(0))
        assert (event.seq, event.kind, event.state, event.epoch) == (4, "epoch", "training", epoch(0))
        assert jobs.events("j1", after_seq=3) == [event]

    def test_only_while_training(self, jobs: JobStore) -> None:
        """A job that is not training cannot record an epoch."""
        submit(jobs, "j1")
        with pytest.raises(JobStateError, match="is queued, not training"):
            jobs.record_epoch("j1", epoch(0))
        assert jobs.epochs("j1") == []


class TestEvents:
    def test_state_message_is_the_latest_state_change(self, jobs: JobStore) -> None:
        """Get's ``state_message``: the words of the newest state event, an epoch event after it aside."""
        submit(jobs, "j1")
        jobs.set_state("j1", "queued", "party 3 is not connected; the job starts once it is")
        assert jobs.state_message("j1") == "party 3 is not connected; the job starts once it is"
        jobs.set_state("j1", "aligning", "waiting for parties [2, 3], then PSI")
        jobs.set_state("j1", "training", "100 common IDs (PSI)")
        jobs.record_epoch("j1", epoch(0))
        assert jobs.state_message("j1") == "100 common IDs (PSI)"
        with pytest.raises(JobNotFound):
            jobs.state_message("nope")

    def test_seq_per_job(self, jobs: JobStore) -> None:
        """Sequence numbers count from 1 for each job separately."""
        submit(jobs, "a")
        submit(jobs, "b")
        jobs.set_state("a", "aligning")
        assert [event.seq for event in jobs.events("a")] == [1, 2]
        assert [event.seq for event in jobs.events("b")] == [1]
        assert jobs.events("a", after_seq=2) == []

    def test_wait_returns_at_once_when_behind(self, jobs: JobStore) -> None:
        """Waiting from before existing events returns them without waiting."""
        submit(jobs, "j1")
        started = time.monotonic()
        assert [event.seq for event in jobs.wait_for_events("j1", 0, timeout_s=5.0)] == [1]
        assert time.monotonic() - started < 1.0

    def test_wait_wakes_on_a_write_from_another_thread(self, jobs: JobStore) -> None:
        """A waiter wakes with the new event as soon as another thread writes it."""
        submit(jobs, "j1")
        writer = threading.Timer(0.05, jobs.set_state, ("j1", "aligning"))
        started = time.monotonic()
        writer.start()
        try:
            woke = jobs.wait_for_events("j1", 1, timeout_s=5.0)
        finally:
            writer.join()
        assert [(event.seq, event.state) for event in woke] == [(2, "aligning")]
        assert time.monotonic() - started < 2.0

    def test_wait_ignores_other_jobs(self, jobs: JobStore) -> None:
        """A write to another job does not end the wait with nothing; the wait times out empty."""
        submit(jobs, "j1")
        submit(jobs, "j2")
        writer = threading.Timer(0.02, jobs.set_state, ("j2", "aligning"))
        writer.start()
        try:
            assert jobs.wait_for_events("j1", 1, timeout_s=0.15) == []
        finally:
            writer.join()

    def test_wait_times_out_empty(self, jobs: JobStore) -> None:
        """With nothing new the wait returns [] after about timeout_s."""
        submit(jobs, "j1")
        started = time.monotonic()
        assert jobs.wait_for_events("j1", 1, timeout_s=0.1) == []
        assert time.monotonic() - started >= 0.1  # it waited; how much longer a busy machine took is not asserted

    def test_close_releases_waiters(self, path: Path) -> None:
        """Closing the store wakes a waiting thread, which returns no events."""
        opened = JobStore(path)
        submit(opened, "j1")
        result: list[object] = []
        waiter = threading.Thread(target=lambda: result.append(opened.wait_for_events("j1", 1, timeout_s=5.0)))
        waiter.start()
        # Close only once the waiter is inside the wait (the condition's waiter list, CPython's): a
        # close that came first would pass this test without a waiter to release (issue 40).
        blocked = threading.Event()
        for _ in range(500):
            if getattr(opened._changed, "_waiters", ()):
                blocked.set()
                break
            blocked.wait(0.01)
        assert blocked.is_set(), "the waiter never blocked"
        opened.close()
        waiter.join(timeout=2.0)
        assert not waiter.is_alive() and result == [[]]


class TestDurability:
    def test_wal_mode(self, jobs: JobStore, path: Path) -> None:
        """The file is in WAL mode, which persists in the file for every later connection."""
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        other.close()

    @pytest.mark.parametrize("end", ["finished", "failed", "cancelled", "interrupted"])
    def test_a_job_end_truncates_the_wal(self, jobs: JobStore, path: Path, end: str) -> None:
        """When a job ends, the WAL is copied into the main file and cut to 0 bytes, nothing lost."""
        wal = path.with_name(path.name + "-wal")
        submit(jobs, "long", epochs=40)
        to_training(jobs, "long")
        for n in range(40):
            jobs.record_epoch("long", epoch(n))
        assert wal.stat().st_size > 40 * 4096  # a page or more per epoch, never shrunk by SQLite itself
        jobs.set_state("long", end, "the end")
        assert wal.stat().st_size == 0
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as reader:
            assert reader.execute("SELECT COUNT(*) FROM epochs WHERE job_id = 'long'").fetchone()[0] == 40
        reader.close()

    def test_a_reader_defers_the_truncation_without_waiting(self, jobs: JobStore, path: Path) -> None:
        """Another process's read transaction keeps the WAL: checkpoint() says so at once, and works once it ends."""
        wal = path.with_name(path.name + "-wal")
        submit(jobs, "j")
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM jobs").fetchone()
            assert jobs.checkpoint() is False
            assert wal.stat().st_size > 0
            reader.execute("COMMIT")
        finally:
            reader.close()
        assert jobs.checkpoint() is True
        assert wal.stat().st_size == 0

    def test_reopen_keeps_everything(self, path: Path) -> None:
        """Closing and reopening the file gives back the same jobs, epochs and events."""
        first = JobStore(path)
        submit(first, "a")
        submit(first, "b")
        to_training(first, "a")
        first.record_epoch("a", epoch(0))
        first.set_state("a", "finished", "done", final_metrics={"accuracy": 0.9})
        first.set_served("a", True)
        before = (first.list(), first.epochs("a"), first.events("a"), first.events("b"))
        first.close()
        second = JobStore(path)
        try:
            assert (second.list(), second.epochs("a"), second.events("a"), second.events("b")) == before
            assert second.next_queued() == second.get("b")
        finally:
            second.close()

    def test_recover_interrupts_running_jobs(self, path: Path) -> None:
        """After a restart, aligning and training jobs are interrupted at the epoch reached; queued ones stay."""
        first = JobStore(path)
        for job_id in ("aligning", "training", "queued", "finished"):
            submit(first, job_id, epochs=5)
        first.set_state("aligning", "aligning")
        to_training(first, "training")
        first.record_epoch("training", epoch(0))
        first.record_epoch("training", epoch(1))
        to_training(first, "finished")
        first.set_state("finished", "finished")
        first.close()  # the server stops without ending its running jobs

        second = JobStore(path)
        try:
            recovered = second.recover()
            assert [job.job_id for job in recovered] == ["aligning", "training"]
            assert all(job.state == "interrupted" and job.ended_at is not None for job in recovered)
            assert second.get("training").error == "the server stopped during training after 2 of 5 epochs"
            assert second.get("aligning").error == "the server stopped during aligning after 0 of 5 epochs"
            assert second.events("training")[-1].message == second.get("training").error
            # dated at the last sign of life, the second epoch: the outage is not time in training
            *before, interrupted = second.events("training")
            assert interrupted.at == before[-1].at == second.get("training").ended_at
            assert (second.get("queued").state, second.get("finished").state) == ("queued", "finished")
            assert second.recover() == []
        finally:
            second.close()

    def test_interrupted_jobs_are_queued_again_to_resume(self, path: Path) -> None:
        """requeue_interrupted queues every interrupted job, oldest first, keeping its epochs and start time."""
        first = JobStore(path)
        for job_id in ("older", "newer"):
            submit(first, job_id, epochs=5)
            to_training(first, job_id)
        first.record_epoch("older", epoch(0))
        first.close()
        second = JobStore(path)
        try:
            second.recover()
            requeued = second.requeue_interrupted()
            assert [job.job_id for job in requeued] == ["older", "newer"]
            assert all(job.state == "queued" and job.ended_at is None and job.started_at for job in requeued)
            assert second.events("older")[-1].message == "resuming after 1 of 5 epochs, from the newest checkpoint"
            assert second.next_queued() == second.get("older")
            assert second.epochs("older") == [epoch(0)]
        finally:
            second.close()

    def test_a_job_waits_for_a_lost_party_then_trains_again(self, jobs: JobStore) -> None:
        """training -> waiting -> training is allowed, and a waiting job can still fail or be cancelled."""
        submit(jobs, "j1")
        to_training(jobs, "j1")
        jobs.set_state("j1", "waiting", "waiting for party 3")
        jobs.set_state("j1", "training", "1170 common IDs")
        jobs.record_epoch("j1", epoch(0))
        jobs.set_state("j1", "waiting", "waiting for party 3")
        jobs.set_state("j1", "failed", "party 3 did not come back")
        assert [e.state for e in jobs.events("j1") if e.kind == "state"][-4:] == [
            "waiting",
            "training",
            "waiting",
            "failed",
        ]

    def test_recover_interrupts_a_waiting_job(self, path: Path) -> None:
        """A job that waited for a lost party when the server stopped is interrupted too, so it resumes."""
        first = JobStore(path)
        submit(first, "j1")
        to_training(first, "j1")
        first.set_state("j1", "waiting", "waiting for party 3")
        first.close()
        second = JobStore(path)
        try:
            assert [job.state for job in second.recover()] == ["interrupted"]
        finally:
            second.close()

    def test_failed_write_rolls_back(self, jobs: JobStore) -> None:
        """A duplicate submission leaves exactly the first job's row and its one event."""
        submit(jobs, "j1")
        with pytest.raises(DuplicateJob, match="'j1' was already submitted"):
            jobs.submit("j1", {"other": {}}, algorithm="other", epochs=1, submitter="someone")
        assert [(job.job_id, job.algorithm) for job in jobs.list()] == [("j1", "splitnn")]
        assert len(jobs.events("j1")) == 1

    def test_write_failing_midway_leaves_nothing(self, jobs: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
        """If the event insert fails after the job row was written, the job row goes too."""

        def broken(*args: object) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(store, "_append_event", broken)
        with pytest.raises(sqlite3.OperationalError):
            submit(jobs, "j1")
        assert jobs.list() == []
        with pytest.raises(JobNotFound):
            jobs.get("j1")


class TestSchema:
    def test_new_store_has_current_version(self, jobs: JobStore, path: Path) -> None:
        """A new store is stamped with the schema version this code ships."""
        assert JobStore.SCHEMA_VERSION == len(store.MIGRATIONS) >= 1
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA user_version").fetchone()[0] == JobStore.SCHEMA_VERSION
        other.close()

    def test_newer_store_is_refused(self, path: Path) -> None:
        """A store from a newer server is refused with an error that says to upgrade, and left as it was."""
        JobStore(path).close()
        newer = JobStore.SCHEMA_VERSION + 1
        with sqlite3.connect(path) as other:
            other.execute(f"PRAGMA user_version = {newer}")
        other.close()
        with pytest.raises(JobStoreError, match=f"schema version {newer}.*upgrade vfl-server"):
            JobStore(path)
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA user_version").fetchone()[0] == newer
        other.close()

    def test_upgrade_keeps_data(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Opening an older store with a newer migration list runs the new migration and keeps every job."""
        older = JobStore(path)
        submit(older, "j1")
        older.close()
        added = "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;"
        monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, added])
        newer = JobStore(path)
        try:
            assert newer.get("j1").state == "queued" and len(newer.events("j1")) == 1
            submit(newer, "j2")
        finally:
            newer.close()
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA user_version").fetchone()[0] == JobStore.SCHEMA_VERSION + 1
            assert other.execute("SELECT job_id, priority FROM jobs ORDER BY seq").fetchall() == [("j1", 0), ("j2", 0)]
        other.close()

    def test_a_store_of_the_first_version_gets_student_metrics(self, path: Path) -> None:
        """A store made before [distill] opens with every job's student metrics empty, and records them after."""
        path.parent.mkdir(parents=True)
        with sqlite3.connect(path) as older:  # what a server before the column left: schema version 1
            migrate(older, path, store.MIGRATIONS[:1])
            older.execute(
                "INSERT INTO jobs (job_id, document, algorithm, epochs, state, submitter, submitted_at) "
                "VALUES ('j1', '{}', 'splitnn', 3, 'queued', 'alice', 1.7e9)"
            )
        older.close()
        newer = JobStore(path)
        try:
            assert newer.get("j1").student_metrics == {}
            to_training(newer, "j1")
            newer.set_student_metrics("j1", {"accuracy": 0.9})
            newer.set_state("j1", "finished", "done", final_metrics={"accuracy": 0.95})
            assert newer.get("j1").student_metrics == {"accuracy": 0.9}
            assert newer.get("j1").final_metrics == {"accuracy": 0.95}
            with pytest.raises(JobNotFound):
                newer.set_student_metrics("nope", {"accuracy": 0.9})
        finally:
            newer.close()

    def test_failed_migration_rolls_back(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A migration that fails part-way leaves the store at its old version and data, and can be retried."""
        older = JobStore(path)
        submit(older, "j1")
        older.close()
        broken = "ALTER TABLE jobs ADD COLUMN priority INTEGER; ALTER TABLE no_such_table ADD COLUMN x;"
        monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, broken])
        v = JobStore.SCHEMA_VERSION
        expected = rf"from schema version {v} to {v + 1} .*no such table.*left at version {v}"
        with pytest.raises(JobStoreError, match=expected):
            JobStore(path)
        monkeypatch.undo()
        reopened = JobStore(path)
        try:
            assert reopened.get("j1").state == "queued"
        finally:
            reopened.close()
        with sqlite3.connect(path) as other:
            columns = [row[1] for row in other.execute("PRAGMA table_info(jobs)")]
            assert other.execute("PRAGMA user_version").fetchone()[0] == JobStore.SCHEMA_VERSION
        other.close()
        assert "priority" not in columns

    def test_not_a_database_is_refused(self, path: Path) -> None:
        """A file that is not SQLite is refused with an error naming it."""
        path.parent.mkdir(parents=True)
        path.write_bytes(b"this is not a database, just some text long enough to fill a header" * 2)
        with pytest.raises(JobStoreError, match="cannot be opened as a job store"):
            JobStore(path)


class TestOneServerPerStore:
    def test_a_second_store_on_the_same_file_is_refused_until_the_first_closes(self, path: Path) -> None:
        """Two servers on one store would both run the same queued job: the second open is refused."""
        first = JobStore(path)
        try:
            with pytest.raises(JobStoreError, match=r"another vfl-server \(pid \d+\) has the job store"):
                JobStore(path)
        finally:
            first.close()
        JobStore(path).close()  # the lock went with the first store
