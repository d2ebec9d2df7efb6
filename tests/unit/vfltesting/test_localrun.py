"""``stop_all``: the teardown of every test that runs the daemons as processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vfltesting import localrun

#: A process that ignores SIGTERM, says so, and would otherwise outlive the test by far.
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
)


class TestStopAll:
    def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No TimeoutExpired out of a teardown, and nothing left running: the straggler gets kill -9."""
        proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"ready\n"
            monkeypatch.setattr(localrun, "STOP_GRACE_S", 0.5, raising=False)
            localrun.stop_all({"stubborn": proc})
            assert proc.returncode == -9
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
