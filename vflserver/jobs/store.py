"""The job store: every job the service was given, its state, epochs and history, in one SQLite file.

Why SQLite: it is embedded, so there is no database server to run beside vfl-server, and the whole
store is one file in the run directory, so there is one thing to back up. Not with ``cp`` while the
server runs, though: a live WAL database is the main file plus its ``-wal`` and ``-shm`` files, and a
plain copy can catch them half-written. A consistent copy, safe while the server runs, is
``sqlite3 jobs.sqlite ".backup copy.sqlite"`` or Python's ``sqlite3.Connection.backup``.

Why WAL: readers (the control API's List, Get and Watch) never block the writer (the job runner), nor
it them, and a crash mid-write leaves the store as of the last commit. Why ``synchronous=FULL``: in WAL
mode NORMAL may lose the last commits on a power cut; writes here are few and small, so one fsync per
commit is cheap and buys that a job reported submitted or finished is still so after a power failure.
When a job ends, the store checkpoints the WAL into the main file and truncates it (``checkpoint``):
SQLite's automatic checkpoint reuses the ``-wal`` file but never shrinks it.

Every write is one ``BEGIN IMMEDIATE`` transaction that rolls back whole if any part fails: a job is
never stored without its "queued" event, nor an epoch without its "epoch" event. Every commit wakes
``wait_for_events``, which is how a Watch stream follows a job without polling. The wake-up is
in-process only: one vfl-server opens a store at a time.

Schema changes are versioned (``vflserver.jobs.schema``).

The states and the records this store hands out live in ``vflserver.jobs.records``; they are
imported from here too, as before.
"""

from __future__ import annotations

import builtins
import dataclasses
import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from vflcore.errors import DuplicateJob, JobNotFound, JobStateError, JobStoreError
from vflserver.jobs.records import (
    ENDED,
    JOB_STATES,
    NEXT_STATES,
    WITH_ERROR,
    EpochRecord,
    JobEvent,
    JobRecord,
    epoch_from_row,
    event_from_row,
    job_from_row,
    nan_as_null,
    plain_floats,
)
from vflserver.jobs.schema import MIGRATIONS, migrate

__all__ = ["ENDED", "JOB_STATES", "MIGRATIONS", "EpochRecord", "JobEvent", "JobRecord", "JobStore"]


class JobStore:
    """The service's jobs in one SQLite file; safe to share between threads."""

    SCHEMA_VERSION: int = len(MIGRATIONS)

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection behind one lock: writes are serialised anyway, and SQLite's own locking
        # then never has to arbitrate between this server's threads.
        self._changed = threading.Condition(threading.Lock())
        self._closed = False
        self._lock_file = _hold_lock(self.path)
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            self._lock_file.close()
            raise JobStoreError(f"{self.path} cannot be opened as a job store ({exc})") from exc
        try:
            self._conn.row_factory = sqlite3.Row
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise JobStoreError(
                    f"SQLite could not put the job store {self.path} in WAL mode (it stayed in {mode} "
                    "mode); put the server's run directory on a local file system"
                )
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            migrate(self._conn, self.path, MIGRATIONS)  # looked up now: a test may extend it
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            self._lock_file.close()
            raise JobStoreError(
                f"{self.path} cannot be opened as a job store ({exc}); if it is not one, move it out "
                "of the server's run directory"
            ) from exc
        except BaseException:
            self._conn.close()
            self._lock_file.close()
            raise

    def close(self) -> None:
        """Close the file; threads in ``wait_for_events`` return at once with no events."""
        with self._changed:
            if not self._closed:
                self._closed = True
                self._conn.close()
                self._lock_file.close()  # releases the lock: another server may open the store now
            self._changed.notify_all()

    # ---- jobs --------------------------------------------------------------------------------

    def submit(
        self, job_id: str, document: dict[str, Any], *, algorithm: str, epochs: int, submitter: str
    ) -> JobRecord:
        """Queue a new job behind every job already queued."""
        if not job_id:
            raise ValueError("a job ID must not be empty")
        if epochs < 0:
            raise ValueError(f"job {job_id!r}: epochs must be 0 or more, not {epochs}")
        text = json.dumps(document, sort_keys=True)
        with self._write() as conn:
            taken = conn.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if taken is not None:
                raise DuplicateJob(
                    f"a job with ID {job_id!r} was already submitted (it is {taken['state']}); "
                    "submit this one under another ID"
                )
            now = time.time()
            conn.execute(
                "INSERT INTO jobs (job_id, document, algorithm, epochs, state, submitter, submitted_at)"
                " VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (job_id, text, algorithm, epochs, submitter, now),
            )
            _append_event(conn, job_id, now, "state", "queued", f"submitted by {submitter}", None, {})
            return _fetch(conn, job_id)

    def get(self, job_id: str) -> JobRecord:
        """The job as it is now."""
        with self._changed:
            return _fetch(self._conn, job_id)

    def list(self, states: Collection[str] = (), limit: int = 0) -> builtins.list[JobRecord]:
        """Jobs newest submission first, only those in ``states`` if given, at most ``limit`` if > 0."""
        unknown = sorted(set(states) - set(JOB_STATES))
        if unknown:
            raise ValueError(f"unknown job state {', '.join(map(repr, unknown))}; the states are {JOB_STATES}")
        if limit < 0:
            raise ValueError(f"limit must be 0 (no limit) or more, not {limit}")
        sql, args = "SELECT * FROM jobs", builtins.list[object](states)
        if states:
            sql += f" WHERE state IN ({', '.join('?' * len(args))})"
        sql += " ORDER BY seq DESC"
        if limit:
            sql += " LIMIT ?"
            args.append(limit)
        with self._changed:
            return [job_from_row(row) for row in self._conn.execute(sql, args)]

    def next_queued(self) -> JobRecord | None:
        """The job queued longest ago, the one to run next; None if the queue is empty."""
        with self._changed:
            row = self._conn.execute("SELECT * FROM jobs WHERE state = 'queued' ORDER BY seq LIMIT 1").fetchone()
        return None if row is None else job_from_row(row)

    def set_state(
        self, job_id: str, state: str, message: str = "", *, final_metrics: Mapping[str, float] | None = None
    ) -> JobEvent:
        """Move the job to ``state`` if the transition is allowed, and record it as an event."""
        if state not in NEXT_STATES:
            raise ValueError(f"unknown job state {state!r}; the states are {JOB_STATES}")
        with self._write() as conn:
            event = _change_state(conn, _fetch(conn, job_id), state, message, final_metrics)
        if state in ENDED:
            self.checkpoint()
        return event

    def checkpoint(self) -> bool:
        """Copy the WAL into the main file and truncate the WAL to 0 bytes; False if a reader kept it.

        SQLite's own checkpoint (every 1000 pages) copies the WAL but never shrinks the file, so
        without this the ``-wal`` file sits at about 4 MB for good. Each epoch adds about 19 KB to
        it and 600 B to the main file (docs/how-to/backups.md). The store calls this when a job ends.
        It does not wait for a reader (another process's ``sqlite3`` shell in a read transaction):
        it returns False at once, and the next job's end tries again.
        """
        with self._changed:
            if self._closed:
                return False
            timeout_ms = self._conn.execute("PRAGMA busy_timeout").fetchone()[0]
            self._conn.execute("PRAGMA busy_timeout = 0")  # never hold the store's lock for a reader
            try:
                busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
        return not busy

    def forget(self, job_id: str) -> None:
        """Delete an ended job, its epochs and its events, so that its ID can be submitted afresh.

        ``vfl-server --once`` re-runs the config's job this way, as the one-shot server always did;
        a queued or running job cannot be forgotten (cancel it first).
        """
        with self._write() as conn:
            record = _fetch(conn, job_id)
            if record.state not in ENDED:
                raise JobStateError(f"job {job_id!r} is {record.state}; only an ended job can be forgotten")
            for table in ("events", "epochs", "jobs"):
                conn.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))

    def set_served(self, job_id: str, served: bool) -> None:
        """Record whether the job's model is being served for inference."""
        with self._write() as conn:
            if not conn.execute("UPDATE jobs SET served = ? WHERE job_id = ?", (served, job_id)).rowcount:
                raise _not_found(job_id)

    def set_student_metrics(self, job_id: str, metrics: Mapping[str, float]) -> None:
        """Record the held-out metrics of the job's ``[distill]`` student (before the job is recorded finished)."""
        text = json.dumps(plain_floats(metrics), sort_keys=True)
        with self._write() as conn:
            if not conn.execute("UPDATE jobs SET student_metrics = ? WHERE job_id = ?", (text, job_id)).rowcount:
                raise _not_found(job_id)

    def recover(self) -> builtins.list[JobRecord]:
        """Mark every job that was aligning, training or waiting when the server stopped as interrupted.

        Call once, when the server starts and before it runs anything: nothing can still be running.
        Such a job's server died (a clean stop interrupts its job itself), so the interruption is
        dated at the job's last event, the last sign of life the store has: the time the server was
        down is then time interrupted, not time in the job's state (the console's phases).
        """
        with self._write() as conn:
            rows = conn.execute(
                "SELECT * FROM jobs WHERE state IN ('aligning', 'training', 'waiting') ORDER BY seq"
            ).fetchall()
            for row in rows:
                job = job_from_row(row)
                message = f"the server stopped during {job.state} after {job.epochs_done} of {job.epochs} epochs"
                [last_seen] = conn.execute("SELECT MAX(at) FROM events WHERE job_id = ?", (job.job_id,)).fetchone()
                _change_state(conn, job, "interrupted", message, None, at=last_seen)
            return [_fetch(conn, row["job_id"]) for row in rows]

    def requeue_interrupted(self) -> builtins.list[JobRecord]:
        """Queue every interrupted job again, in submission order, to resume from its checkpoints.

        The runner takes the oldest queued job first, so these run before jobs submitted later.
        """
        with self._write() as conn:
            rows = conn.execute("SELECT * FROM jobs WHERE state = 'interrupted' ORDER BY seq").fetchall()
            for row in rows:
                job = job_from_row(row)
                message = f"resuming after {job.epochs_done} of {job.epochs} epochs, from the newest checkpoint"
                _change_state(conn, job, "queued", message, None)
            return [_fetch(conn, row["job_id"]) for row in rows]

    def counts_by_state(self) -> dict[str, int]:
        """How many jobs are in each state, every state present."""
        counts = dict.fromkeys(JOB_STATES, 0)
        with self._changed:
            for row in self._conn.execute("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state"):
                counts[row["state"]] = row["n"]
        return counts

    # ---- epochs --------------------------------------------------------------------------------

    def record_epoch(self, job_id: str, epoch: EpochRecord) -> JobEvent | None:
        """Store a finished epoch of a training job, with its "epoch" event; returns the event.

        An epoch trained again (a resumed job rolled back to a checkpoint older than the epochs
        already recorded) replaces its row, so ``epochs`` and ``vfl-jobs show`` give its newest
        report, but adds no second event and returns None: the history, and so a Watch stream,
        has one "epoch" event per epoch, as many as the job has epochs. The state events
        between them (``waiting``, ``queued``, ``training``) say that the job resumed.
        """
        if epoch.epoch < 0:
            raise ValueError(f"job {job_id!r}: epochs count from 0, not {epoch.epoch}")
        # Plain ints and floats only, so that the JSON copy in the event reads back the same.
        epoch = EpochRecord(
            int(epoch.epoch),
            float(epoch.train_loss),
            float(epoch.test_loss),
            plain_floats(epoch.metrics),
            float(epoch.seconds),
            int(epoch.wire_bytes),
        )
        with self._write() as conn:
            job = _fetch(conn, job_id)
            if job.state != "training":
                raise JobStateError(
                    f"job {job_id!r} is {job.state}, not training: it cannot record epoch {epoch.epoch}"
                )
            again = conn.execute(
                "SELECT 1 FROM epochs WHERE job_id = ? AND epoch = ?", (job_id, epoch.epoch)
            ).fetchone()
            conn.execute(
                "INSERT OR REPLACE INTO epochs (job_id, epoch, train_loss, test_loss, metrics, seconds, wire_bytes)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    epoch.epoch,
                    nan_as_null(epoch.train_loss),
                    nan_as_null(epoch.test_loss),
                    json.dumps(epoch.metrics, sort_keys=True),
                    epoch.seconds,
                    epoch.wire_bytes,
                ),
            )
            conn.execute("UPDATE jobs SET epochs_done = ? WHERE job_id = ?", (epoch.epoch + 1, job_id))
            if again is not None:
                return None
            message = f"epoch {epoch.epoch + 1} of {job.epochs}"
            return _append_event(conn, job_id, time.time(), "epoch", job.state, message, epoch, {})

    def record_warning(self, job_id: str, message: str) -> JobEvent:
        """Add a "warning" event to the job's history (a test loss far past its best); its state stays."""
        with self._write() as conn:
            job = _fetch(conn, job_id)
            return _append_event(conn, job_id, time.time(), "warning", job.state, message, None, {})

    def epochs(self, job_id: str) -> builtins.list[EpochRecord]:
        """The job's epochs in order, each as last recorded."""
        with self._changed:
            _fetch(self._conn, job_id)
            rows = self._conn.execute("SELECT * FROM epochs WHERE job_id = ? ORDER BY epoch", (job_id,)).fetchall()
        return [epoch_from_row(row) for row in rows]

    # ---- history -------------------------------------------------------------------------------

    def events(self, job_id: str, after_seq: int = 0) -> builtins.list[JobEvent]:
        """The job's events with a sequence number above ``after_seq``, oldest first."""
        with self._changed:
            return self._events(job_id, after_seq)

    def state_message(self, job_id: str) -> str:
        """What the job's latest state change said: why it is queued or waiting, how it ended."""
        with self._changed:
            _fetch(self._conn, job_id)
            row = self._conn.execute(
                "SELECT message FROM events WHERE job_id = ? AND kind = 'state' ORDER BY seq DESC LIMIT 1", (job_id,)
            ).fetchone()
        return str(row[0]) if row is not None else ""

    def wait_for_events(self, job_id: str, after_seq: int, timeout_s: float) -> builtins.list[JobEvent]:
        """The events after ``after_seq``, waiting up to ``timeout_s`` for one; [] if none came."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self._closed:
                found = self._events(job_id, after_seq)
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found
                self._changed.wait(left)
        return []

    # ---- inside the lock -----------------------------------------------------------------------

    def _events(self, job_id: str, after_seq: int) -> builtins.list[JobEvent]:
        _fetch(self._conn, job_id)
        rows = self._conn.execute(
            "SELECT * FROM events WHERE job_id = ? AND seq > ? ORDER BY seq", (job_id, after_seq)
        ).fetchall()
        return [event_from_row(row) for row in rows]

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock; it commits whole or not at all, then wakes waiters."""
        with self._changed:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise
            self._changed.notify_all()


# ---- rows ----------------------------------------------------------------------------------------


def _hold_lock(path: Path) -> IO[str]:
    """Hold ``<store>.lock`` for as long as the store is open: one server per store.

    Two servers on one store would both take the same queued job; the one that lost the race
    would then fail the other's running job. The lock is an advisory ``flock``: the kernel drops
    it when the process dies, so a crash never leaves a stale lock behind.
    """
    lock_path = path.with_name(path.name + ".lock")
    handle = lock_path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise JobStoreError(
            f"another vfl-server (pid {holder}) has the job store {path} open; stop it, or give this one "
            "its own run directory or --store"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _change_state(
    conn: sqlite3.Connection,
    job: JobRecord,
    state: str,
    message: str,
    final_metrics: Mapping[str, float] | None,
    *,
    at: float | None = None,
) -> JobEvent:
    """Move ``job`` to ``state`` with its event, now or (``at``) when it was known to happen."""
    if state not in NEXT_STATES[job.state]:
        allowed = ", ".join(sorted(NEXT_STATES[job.state])) or "nothing: it has ended"
        raise JobStateError(f"job {job.job_id!r} is {job.state} and cannot become {state}; it can become {allowed}")
    now = time.time() if at is None else at
    started_at = now if state == "aligning" and job.started_at is None else job.started_at
    ended_at = now if state in ENDED else None  # a job re-queued after an interruption has not ended
    error = message if state in WITH_ERROR else ""
    metrics = plain_floats(final_metrics) if final_metrics is not None else job.final_metrics
    conn.execute(
        "UPDATE jobs SET state = ?, started_at = ?, ended_at = ?, error = ?, final_metrics = ? WHERE job_id = ?",
        (state, started_at, ended_at, error, json.dumps(metrics, sort_keys=True), job.job_id),
    )
    event_metrics = metrics if final_metrics is not None else {}
    return _append_event(conn, job.job_id, now, "state", state, message, None, event_metrics)


def _append_event(
    conn: sqlite3.Connection,
    job_id: str,
    at: float,
    kind: str,
    state: str,
    message: str,
    epoch: EpochRecord | None,
    final_metrics: dict[str, float],
) -> JobEvent:
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?", (job_id,)).fetchone()[0]
    snapshot = None if epoch is None else json.dumps(dataclasses.asdict(epoch), sort_keys=True)
    conn.execute(
        "INSERT INTO events (job_id, seq, at, kind, state, message, epoch, final_metrics)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (job_id, seq, at, kind, state, message, snapshot, json.dumps(final_metrics, sort_keys=True)),
    )
    return JobEvent(job_id, seq, at, kind, state, message, epoch, dict(final_metrics))


def _fetch(conn: sqlite3.Connection, job_id: str) -> JobRecord:
    row = conn.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    if row is None:
        raise _not_found(job_id)
    return job_from_row(row)


def _not_found(job_id: str) -> JobNotFound:
    return JobNotFound(f"no job with ID {job_id!r} in the job store; list the jobs to see their IDs")
