"""The shared daemon launcher: test processes attached over its socket fork, wait for and outlive nothing.

The launcher loop runs here without its preload (``serve`` in a plain ``python -c``), so the test
costs tenths of a second, not the 7 CPU-s of imports; ``Launcher.shared`` adds only that preload.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from vfltesting.eventually import eventually
from vfltesting.forked import SOCKET_NAME, Launcher
from vfltesting.paths import REPO_ROOT

#: ``vfl-certs``'s main: a command ``_main_of`` accepts (``python -m <module>``) that imports no torch.
HELP = [sys.executable, "-m", "vflcore.security.certs_cli", "--help"]
SERVE = (
    "import sys; from pathlib import Path; from vfltesting.forked import serve; "
    "serve(Path(sys.argv[1]), listen=sys.argv[2])"
)


@pytest.fixture
def bare_launcher(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The launcher's loop listening on a socket, owned through its stdin as ``Launcher.shared``'s is."""
    statuses = tmp_path / "statuses"
    statuses.mkdir()
    address = str(statuses / SOCKET_NAME)
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    owner = subprocess.Popen([sys.executable, "-c", SERVE, str(statuses), address], stdin=subprocess.PIPE, env=env)
    try:
        yield owner, address
    finally:
        if owner.stdin is not None:
            owner.stdin.close()
        owner.wait(timeout=30)


class TestAttached:
    def test_two_test_processes_fork_through_one_launcher_and_read_their_own_exit_codes(
        self, bare_launcher: tuple[subprocess.Popen[bytes], str], tmp_path: Path
    ) -> None:
        _, address = bare_launcher
        results: dict[int, tuple[int, int, str]] = {}

        def worker(n: int) -> None:
            with Launcher.attached(address) as launcher:
                out = tmp_path / f"out-{n}.txt"
                daemon = launcher.start(
                    HELP, stderr=tmp_path / f"err-{n}.txt", append=False, env={}, cwd=tmp_path, stdout=out
                )
                results[n] = (daemon.pid, daemon.wait(timeout=60), out.read_text())

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
        assert sorted(results) == [0, 1], (tmp_path / "err-0.txt").read_text()
        assert results[0][0] != results[1][0]
        for _, code, out in results.values():
            assert code == 0
            assert "usage:" in out

    def test_an_attached_launcher_sees_the_shared_one_end_and_only_its_owner_ends_it(
        self, bare_launcher: tuple[subprocess.Popen[bytes], str], tmp_path: Path
    ) -> None:
        owner, address = bare_launcher
        first = Launcher.attached(address)
        first.close()  # one test process leaving ends nothing
        with Launcher.attached(address) as launcher:
            assert launcher.running()
            daemon = launcher.start(HELP, stderr=tmp_path / "err.txt", append=False, env={}, cwd=tmp_path)
            assert daemon.wait(timeout=60) == 0
            assert owner.stdin is not None
            owner.stdin.close()
            assert owner.wait(timeout=30) == 0
            eventually(lambda: not launcher.running(), "the attached launcher to see the shared one gone", 10)
            assert not Path(address).exists()

    def test_no_launcher_at_the_address_is_an_error_that_names_it(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("vfltesting.forked.ATTACH_TIMEOUT_S", 0.2)
        with pytest.raises(RuntimeError, match=str(tmp_path / "nothing.sock")):
            Launcher.attached(str(tmp_path / "nothing.sock"))
