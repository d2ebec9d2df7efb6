"""``vfl-client --check`` through its real entry point, against a real mTLS server.

``vflclient.cli.main`` runs in this process: it parses the flags, runs the preflight diagnosis,
then a Heartbeat, and prints one ``[ok]``/``[FAIL]`` line per check on stdout.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from vflclient.cli import main
from vflcore.runtime import daemon
from vfltesting.in_process import RunningJob
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration


def _check(pki: Pki, digits_data: Path, server: str, *, party: int, cert_party: int) -> list[str]:
    files = pki.party_files(cert_party)
    return [
        "--check",
        "--party",
        str(party),
        "--server",
        server,
        "--data",
        str(digits_data / f"party{party}.csv"),
        "--ca",
        str(files.ca),
        "--cert",
        str(files.cert),
        "--key",
        str(files.key),
        "--log-format",
        "json",
    ]


def _closed_port() -> int:
    """A local port that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.usefixtures("restore_logging")
class TestClientCheck:
    def test_all_good(
        self, job_factory: Callable[..., RunningJob], pki: Pki, digits_data: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With the right party, certificate and server, --check exits 0 and the heartbeat names the party.

        Its report is all it prints: no log line on stderr (issue 49 found a stray ``crash_traces``).
        """
        running = job_factory()
        code = main(_check(pki, digits_data, running.address, party=2, cert_party=2))
        out, err = capsys.readouterr()
        assert code == daemon.EXIT_OK, out
        assert "[FAIL]" not in out, out
        assert "[ok] heartbeat: the server sees this connection as party 2; job state: waiting" in out, out
        assert err == "", err

    def test_wrong_party(
        self, job_factory: Callable[..., RunningJob], pki: Pki, digits_data: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Running as --party 3 with party 2's certificate fails and says "wrong party" with both ids."""
        running = job_factory()
        code = main(_check(pki, digits_data, running.address, party=3, cert_party=2))
        out = capsys.readouterr().out
        assert code != daemon.EXIT_OK, out
        assert "[FAIL] party: wrong party: certificate says party 2 but you run --party 3" in out, out
        assert "heartbeat" not in out, "no heartbeat should be tried once a check failed"

    def test_server_down(self, pki: Pki, digits_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """With nothing listening on the port, --check fails with a readable "cannot reach" line."""
        address = f"127.0.0.1:{_closed_port()}"
        code = main(_check(pki, digits_data, address, party=2, cert_party=2))
        out, err = capsys.readouterr()
        assert code == daemon.EXIT_UNREACHABLE, out
        assert err == "", err  # a failed check too: the report says it all
        assert f"[FAIL] server-reachable: cannot reach {address}: connection refused" in out, out
        assert "is vfl-server running there" in out, out
        # The local files are fine; only the server is missing.
        assert "[ok] party:" in out and "[ok] issuer:" in out, out

    def test_a_config_error_is_still_shown(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Only the log line went: a config --check cannot use is refused on stderr, naming the key, exit 2."""
        config = tmp_path / "party2.toml"
        config.write_text('[client]\nsever = "127.0.0.1:1"\n[data]\npath = "party2.csv"\n')
        code = main(["--check", "--party", "2", "--config", str(config), "--log-format", "json"])
        out, err = capsys.readouterr()
        assert code == daemon.EXIT_CONFIG, err
        assert out == "", out
        assert err.startswith("vfl-client: ") and "[client] has no key 'sever'" in err, err
        assert err.count("\n") == 1, err
