"""SIGTERM and SIGINT stop the daemons cleanly, with the documented exit codes (143 and 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from vfltesting.pki import Pki

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _server(pki: Pki, data: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    files = pki.server_files()
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [str(BIN / "vfl-server"), "--once", "--listen", "127.0.0.1:0", "--port-file", str(port_file)]
        + ["--data", str(data / "party1.csv"), "--ca", str(files.ca), "--cert", str(files.cert)]
        + ["--key", str(files.key), "--run-dir", str(tmp_path / "runs"), "--log-format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return proc, int(_wait_for(port_file, proc))


class TestSignals:
    @pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
    def test_server_waiting_for_parties_stops_cleanly(
        self, pki: Pki, digits_data: Path, tmp_path: Path, signum: int, code: int
    ) -> None:
        """A server still waiting for its parties exits with 143 on SIGTERM and 130 on SIGINT."""
        proc, _ = _server(pki, digits_data, tmp_path)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == code, err.decode()
        assert b"stopped by signal" in err

    def test_client_stops_cleanly_and_server_notices(self, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
        """A joined client exits 143 on SIGTERM; the server then logs it offline and still stops on its own signal."""
        server, port = _server(pki, digits_data, tmp_path)
        files = pki.party_files(2)
        client = subprocess.Popen(
            [str(BIN / "vfl-client"), "--once", "--party", "2", "--server", f"127.0.0.1:{port}"]
            + ["--data", str(digits_data / "party2.csv"), "--ca", str(files.ca), "--cert", str(files.cert)]
            + ["--key", str(files.key), "--run-dir", str(tmp_path / "runs"), "--log-format", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            joined = b""
            while b"party_online" not in joined and time.monotonic() < deadline:
                time.sleep(0.1)
                if client.poll() is not None:
                    break
                # the server logs party_online on stderr; read what is there without blocking
                joined += _drain(server.stderr)
            assert b"party_online" in joined, joined.decode()
            client.send_signal(signal.SIGTERM)
            client.communicate(timeout=30)
            assert client.returncode == 143
        finally:
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=30)
        assert server.returncode == 143
        assert b"party_offline" in joined + err


def _drain(stream: IO[bytes] | None) -> bytes:
    assert stream is not None
    fd = stream.fileno()
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 1 << 16) or b""
    except BlockingIOError:
        return b""
