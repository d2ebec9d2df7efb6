"""vflserver.jobs.run_marker: a start finds out whether the last server on its store stopped cleanly."""

from __future__ import annotations

import os
import time
from pathlib import Path

from vflserver.jobs.run_marker import LastRun, RunMarker


def test_a_first_start_and_a_start_after_a_clean_stop_find_nothing(tmp_path: Path) -> None:
    marker = RunMarker(tmp_path / "jobs.sqlite")
    assert marker.path == tmp_path / "jobs.sqlite.running"
    assert marker.claim() is None
    assert marker.path.exists()
    marker.release()
    assert not marker.path.exists()
    assert RunMarker(tmp_path / "jobs.sqlite").claim() is None


def test_a_start_after_a_run_that_never_released_finds_it(tmp_path: Path) -> None:
    """The crashed run's pid and start time; the new run's marker replaces it."""
    before = time.time()
    RunMarker(tmp_path / "jobs.sqlite").claim()  # a run that then died: no release
    last = RunMarker(tmp_path / "jobs.sqlite").claim()
    assert last is not None and last.pid == os.getpid()
    assert last.started_at is not None and before <= last.started_at <= time.time()
    assert not list(tmp_path.glob("*.tmp")), "the marker is written whole, by a rename"


def test_a_marker_cut_short_still_counts(tmp_path: Path) -> None:
    """A crash while the marker was written, or a file someone emptied: an unclean stop with nothing known."""
    marker = RunMarker(tmp_path / "jobs.sqlite")
    marker.path.write_text('{"pid": 12')
    assert marker.claim() == LastRun(pid=None, started_at=None)
