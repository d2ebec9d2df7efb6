"""The suite's daemon launcher (``vfltesting.forked``) behaves like exec for what the tests rely on.

Exit codes in ``Popen``'s convention, stderr in the daemon's log, signals reaching the daemon's
own handlers, and ``wait`` timing out: every ``ServiceRun`` in the integration suite depends on it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vfltesting.forked import Launcher
from vfltesting.pki import Pki
from vfltesting.service import BIN, ServiceRun, log_events, service_env, wait_until

pytestmark = pytest.mark.integration


def test_a_config_error_exits_2_with_the_message_in_the_log(forked_daemons: Launcher, tmp_path: Path) -> None:
    log = tmp_path / "party-2.log"
    missing = tmp_path / "nowhere.toml"
    command = [str(BIN / "vfl-client"), "--party", "2", "--config", str(missing)]
    daemon = forked_daemons.start(command, stderr=log, append=False, env=service_env(), cwd=tmp_path)
    assert daemon.wait(timeout=60) == 2
    assert "nowhere.toml" in log.read_text()


def test_signals_reach_the_daemon_and_wait_times_out_while_it_runs(
    forked_daemons: Launcher, pki: Pki, digits_data: Path, tmp_path: Path
) -> None:
    """A party with no server retries forever: wait(timeout) expires, SIGTERM stops it (exit 0, as
    docs/how-to/systemd.md says of a daemon), kill -9 gives -9."""
    run = ServiceRun(tmp_path, pki, digits_data, port=9)  # nothing listens on port 9: the daemons retry
    run.start_client(2)
    run.start_client(3)
    party2, party3 = run.procs["party-2"], run.procs["party-3"]
    try:
        wait_until(lambda: bool(log_events(run.logs["party-2"], "server_unreachable")), "a failed dial", run)
        with pytest.raises(subprocess.TimeoutExpired):
            party2.wait(timeout=0.2)
        assert party2.poll() is None
        party2.terminate()
        party3.kill()
        assert (party2.wait(timeout=60), party3.wait(timeout=60)) == (0, -9)
        assert party2.returncode == 0 and party3.poll() == -9
    finally:
        run.close()
