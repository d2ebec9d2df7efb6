"""``--log-file``: the real daemons append JSON lines to the file and, on SIGHUP, go on in a fresh one.

What logrotate does on a host without systemd: rename the file, then signal the daemon
(``postrotate ... kill -HUP``). The daemon must survive the signal, write its next lines to a new
file under the old name, and leave the renamed one as it was.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from vflclient import JobClient
from vfltesting.eventually import eventually
from vfltesting.forked import Launcher
from vfltesting.localrun import Daemon, wait_for_port
from vfltesting.pki import Pki
from vfltesting.service import BIN, ServiceRun, job_document, service_env

pytestmark = pytest.mark.integration

#: A "did not hang" guard only: the machine is shared, and a daemon's start takes seconds there.
_PATIENCE_S = 120


def _events(path: Path) -> list[str]:
    """The events of a log file's complete lines (every line must be one JSON object)."""
    if not path.exists():
        return []
    return [json.loads(line)["event"] for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def _json_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("{")]


def _wait_for_event(path: Path, event: str, proc: Daemon, stderr: Path) -> None:
    def logged() -> bool:
        assert proc.poll() is None, f"the daemon exited with {proc.returncode}: {stderr.read_text()}"
        return event in _events(path)

    eventually(
        logged,
        f"{event!r} in {path}",
        _PATIENCE_S,
        every=0.05,
        explain=lambda: f"{_events(path)}; stderr: {stderr.read_text()}",
    )


def _rotate(path: Path, proc: Daemon) -> Path:
    """What logrotate does without copytruncate: rename the file, then SIGHUP the daemon."""
    rotated = path.with_name(path.name + ".1")
    path.rename(rotated)
    proc.send_signal(signal.SIGHUP)
    return rotated


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture
def run(pki: Pki, digits_data: Path, tmp_path: Path) -> ServiceRun:
    """Only for the configs, written as docs/how-to/systemd.md documents them; the test starts the daemons."""
    return ServiceRun(tmp_path, pki, digits_data, parties=(2, 3), serving=False)


@pytest.fixture
def procs() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _start(cmd: list[str], root: Path, stderr: Path, procs: list[Daemon], launcher: Launcher | None = None) -> Daemon:
    """``cmd`` exec'd, or forked by ``launcher``; stdout to /dev/null, stderr to ``stderr``."""
    proc: Daemon
    if launcher is not None:
        proc = launcher.start(cmd, stderr=stderr, append=False, env=service_env(), cwd=root)
    else:
        with stderr.open("wb") as sink:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sink, env=service_env(), cwd=root)
    procs.append(proc)
    return proc


class TestLogFile:
    def test_server_reopens_its_log_file_on_sighup(
        self, run: ServiceRun, pki: Pki, tmp_path: Path, procs: list[Daemon], forked_daemons: Launcher
    ) -> None:
        """vfl-server --log-file: JSON lines in the file; after a rename and SIGHUP, new lines in a fresh file.

        Forked (``vfltesting.forked``, ~1 CPU-s a start, not ~6), as the client below: the log
        file's mode and the SIGHUP handler are ``main``'s, which the fork runs; a service-mode
        server's exec'd start, SIGTERM and exit 0 are ``make demo``'s (CI).
        """
        log, stderr = tmp_path / "server.log", tmp_path / "server.stderr"
        config = run.server_config("127.0.0.1:0")
        cmd = [str(BIN / "vfl-server"), "--config", str(config), "--log-file", str(log)]
        server = _start(cmd, tmp_path, stderr, procs, forked_daemons)
        port = wait_for_port(tmp_path / "port", server, timeout_s=_PATIENCE_S)
        _wait_for_event(log, "service_started", server, stderr)
        assert stat.S_IMODE(log.stat().st_mode) == 0o640 & ~_umask()

        rotated = _rotate(log, server)
        _wait_for_event(log, "log_file_reopened", server, stderr)
        with JobClient(f"127.0.0.1:{port}", tls=pki.operator_files("alice")) as jobs:
            jobs.submit(job_document("after-rotation", "splitnn"))
        _wait_for_event(log, "job_submitted", server, stderr)

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=_PATIENCE_S) == 0, stderr.read_text()
        before, after = _events(rotated), _events(log)
        assert "service_started" in before and "log_file_reopened" not in before and "job_submitted" not in before
        assert after[0] == "log_file_reopened"
        assert "job_submitted" in after and "service_stopped" in after
        assert _json_lines(stderr) == []  # no log line went to stderr

    def test_client_reopens_its_log_file_on_sighup(
        self, run: ServiceRun, tmp_path: Path, procs: list[Daemon], forked_daemons: Launcher
    ) -> None:
        """vfl-client --log-file: a daemon retrying an absent server goes on logging in a fresh file after SIGHUP.

        Forked (``vfltesting.forked``, ~1 CPU-s a start, not ~6): it runs the console script's ``main``, whose
        SIGHUP handler is the one under test.
        """
        log, stderr = tmp_path / "party-2.log", tmp_path / "party-2.stderr"
        config = run.client_config(2, f"127.0.0.1:{_free_port()}")  # nobody listens: it logs each retry
        cmd = [str(BIN / "vfl-client"), "--party", "2", "--config", str(config), "--log-file", str(log)]
        client = _start(cmd, tmp_path, stderr, procs, forked_daemons)
        _wait_for_event(log, "server_unreachable", client, stderr)

        rotated = _rotate(log, client)
        _wait_for_event(log, "log_file_reopened", client, stderr)
        retries = _events(log).count("server_unreachable")
        # the next retry lands in the fresh file
        eventually(
            lambda: _events(log).count("server_unreachable") != retries,
            "the next retry",
            _PATIENCE_S,
            every=0.05,
            explain=lambda: str(_events(log)),
        )

        client.send_signal(signal.SIGTERM)
        assert client.wait(timeout=_PATIENCE_S) == 0, stderr.read_text()
        assert "log_file_reopened" not in _events(rotated)
        assert _events(log)[0] == "log_file_reopened"
        assert all(json.loads(line)["party"] == 2 for line in log.read_text().splitlines())
        assert _json_lines(stderr) == []
