"""vflcore.runtime.log_file: ``--log-file`` appends whole JSON lines, and SIGHUP reopens the file for logrotate."""

from __future__ import annotations

import argparse
import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from vflcore.errors import ConfigError
from vflcore.runtime import daemon
from vflcore.runtime.log_file import FILE_MODE, LogFile
from vflcore.runtime.logs import get_logger

# Every test leaves structlog, stdlib logging and context variables as they were (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture
def keep_sighup() -> Iterator[None]:
    """Put back the test process's SIGHUP handler, which setup_logging replaces."""
    before = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, before)


def _events(path: Path) -> list[str]:
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _daemon_args(path: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    daemon.add_logging_flags(parser)
    daemon.add_log_file_flag(parser)
    return parser.parse_args(["--log-file", str(path)])


class TestLogFile:
    def test_appends_and_creates_with_mode_0640(self, tmp_path: Path) -> None:
        """A new file is created 0640 (less the umask); an existing one is appended to, never truncated."""
        path = tmp_path / "vfl.log"
        first = LogFile(path)
        first.write("one\n")
        first.close()
        assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE & ~_umask()
        second = LogFile(path)
        second.write("two\n")
        second.close()
        assert path.read_text() == "one\ntwo\n"

    def test_reopen_writes_to_a_fresh_file_after_a_move(self, tmp_path: Path) -> None:
        """After the file is moved away (logrotate), reopen() creates a fresh one; the moved file keeps its lines."""
        path, rotated = tmp_path / "vfl.log", tmp_path / "vfl.log.1"
        log_file = LogFile(path)
        log_file.write("before\n")
        path.rename(rotated)
        log_file.write("moved\n")  # until the reopen, lines follow the open file, as logrotate expects
        log_file.reopen()
        log_file.write("after\n")
        log_file.close()
        assert rotated.read_text() == "before\nmoved\n"
        assert path.read_text() == "after\n"

    def test_a_line_written_in_two_parts_is_never_split_by_a_reopen(self, tmp_path: Path) -> None:
        """print() writes a line and its newline separately; a reopen between them leaves the line whole in one file."""
        path, rotated = tmp_path / "vfl.log", tmp_path / "vfl.log.1"
        log_file = LogFile(path)
        log_file.write('{"event": "half')
        path.rename(rotated)
        log_file.reopen()
        log_file.write('"}')
        log_file.write("\n")
        log_file.close()
        assert rotated.read_text() == ""
        assert path.read_text() == '{"event": "half"}\n'

    def test_a_failed_reopen_keeps_logging_to_the_open_file(self, tmp_path: Path) -> None:
        """If the fresh file cannot be made, reopen() says why, naming it, and lines still go to the old file."""
        folder = tmp_path / "logs"
        folder.mkdir()
        path, elsewhere = folder / "vfl.log", tmp_path / "kept.log"
        log_file = LogFile(path)
        path.rename(elsewhere)
        folder.rmdir()
        with pytest.raises(ConfigError, match=rf"--log-file {path}: .*create the folder {folder}"):
            log_file.reopen()
        log_file.write("still here\n")
        log_file.close()
        assert elsewhere.read_text() == "still here\n"

    def test_a_missing_folder_is_a_config_error_naming_the_file(self, tmp_path: Path) -> None:
        """--log-file in a folder that does not exist fails at start with what to do."""
        path = tmp_path / "nope" / "vfl.log"
        with pytest.raises(ConfigError, match=rf"--log-file {path}: cannot open it to append .*create the folder"):
            LogFile(path)


class TestSetupLogging:
    @pytest.mark.usefixtures("keep_sighup")
    def test_log_lines_go_to_the_file_as_json(self, tmp_path: Path) -> None:
        """With --log-file, each event is one JSON line in the file, with the bound party."""
        path = tmp_path / "vfl.log"
        daemon.setup_logging(_daemon_args(path))
        structlog.contextvars.bind_contextvars(party=2)
        get_logger("vfl.test").info("connected", server="127.0.0.1:1")
        event = json.loads(path.read_text())
        assert (event["event"], event["party"], event["level"]) == ("connected", 2, "info")

    @pytest.mark.usefixtures("keep_sighup")
    def test_sighup_reopens_the_file(self, tmp_path: Path) -> None:
        """SIGHUP makes the process write to a fresh file under the name, starting with log_file_reopened."""
        path, rotated = tmp_path / "vfl.log", tmp_path / "vfl.log.1"
        daemon.setup_logging(_daemon_args(path))
        structlog.contextvars.bind_contextvars(party=2)
        get_logger("vfl.test").info("before")
        path.rename(rotated)
        os.kill(os.getpid(), signal.SIGHUP)
        deadline = time.monotonic() + 60  # a did-not-hang guard: the reopen runs on its own thread
        while not (path.exists() and path.read_text().endswith("\n")):
            assert time.monotonic() < deadline, "SIGHUP did not reopen the log file"
            time.sleep(0.01)
        get_logger("vfl.test").info("after")
        assert _events(rotated) == ["before"]
        assert _events(path) == ["log_file_reopened", "after"]
        assert json.loads(path.read_text().splitlines()[0])["party"] == 2
