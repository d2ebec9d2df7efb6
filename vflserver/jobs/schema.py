"""The job store's schema and how a store is brought up to it.

Schema changes are versioned: ``MIGRATIONS`` is an ordered list of SQL scripts and ``PRAGMA
user_version`` counts how many have run. Opening a store runs the missing ones in order, each in its
own transaction, so a newer server opens an older store. A store whose version is above
``len(MIGRATIONS)`` was made by a newer vfl-server with tables this code does not know, and is refused
rather than guessed at. Never edit a shipped migration; append a new one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from vflcore.errors import JobStoreError

MIGRATIONS: list[str] = [
    # 1: jobs in submission order (``seq``), one row per finished epoch, and each job's history.
    # Losses are NULL for NaN, which SQLite cannot store. An event keeps its own copy of the epoch
    # (JSON): what was reported when the epoch first ended. (Stores written before issue 27 may
    # hold a second "epoch" event for an epoch a resumed job trained again; newer ones do not.)
    """
    CREATE TABLE jobs (
        seq           INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id        TEXT    NOT NULL UNIQUE,
        document      TEXT    NOT NULL,
        algorithm     TEXT    NOT NULL,
        epochs        INTEGER NOT NULL,
        state         TEXT    NOT NULL,
        submitter     TEXT    NOT NULL,
        submitted_at  REAL    NOT NULL,
        started_at    REAL,
        ended_at      REAL,
        error         TEXT    NOT NULL DEFAULT '',
        epochs_done   INTEGER NOT NULL DEFAULT 0,
        final_metrics TEXT    NOT NULL DEFAULT '{}',
        served        INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX jobs_by_state ON jobs (state, seq);
    CREATE TABLE epochs (
        job_id      TEXT    NOT NULL REFERENCES jobs (job_id),
        epoch       INTEGER NOT NULL,
        train_loss  REAL,
        test_loss   REAL,
        metrics     TEXT    NOT NULL,
        seconds     REAL    NOT NULL,
        wire_bytes  INTEGER NOT NULL,
        PRIMARY KEY (job_id, epoch)
    ) WITHOUT ROWID;
    CREATE TABLE events (
        job_id        TEXT    NOT NULL REFERENCES jobs (job_id),
        seq           INTEGER NOT NULL,
        at            REAL    NOT NULL,
        kind          TEXT    NOT NULL,
        state         TEXT    NOT NULL,
        message       TEXT    NOT NULL,
        epoch         TEXT,
        final_metrics TEXT    NOT NULL,
        PRIMARY KEY (job_id, seq)
    ) WITHOUT ROWID;
    """,
    # 2: a [distill] job's student: its held-out metrics, beside the job's own (vfl-jobs show).
    """
    ALTER TABLE jobs ADD COLUMN student_metrics TEXT NOT NULL DEFAULT '{}';
    """,
]


def migrate(conn: sqlite3.Connection, path: Path, migrations: Sequence[str] = MIGRATIONS) -> None:
    """Bring the schema up to ``len(migrations)``, one transaction per migration."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    known = len(migrations)
    if found > known:
        raise JobStoreError(
            f"the job store {path} was made by a newer vfl-server (schema version {found}; this "
            f"vfl-server knows up to {known}): upgrade vfl-server to open it"
        )
    for version in range(found + 1, known + 1):
        try:
            script = migrations[version - 1]
            conn.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {version};\nCOMMIT;")
        except BaseException as exc:
            if conn.in_transaction:
                conn.rollback()
            if isinstance(exc, sqlite3.DatabaseError):
                raise JobStoreError(
                    f"could not bring the job store {path} from schema version {version - 1} to {version} "
                    f"({exc}); it was left at version {version - 1}: keep the file and report this"
                ) from exc
            raise
