"""A stop that hangs ends with every thread's stack and exit 1, not with systemd's silent SIGKILL.

A child Python process installs the daemons' own signal handling (``ShutdownSignals``) with a
stop that does nothing, then blocks its main thread in a function named for the case, as a daemon
would whose thread waits on a peer that is gone. SIGTERM arms the stop deadline
(``vflcore.runtime.crash_trace.arm_stop_deadline``, shortened here); the child must exit 1 and
its stderr must name the function the main thread was held in.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

#: The child: the deadline shortened to half a second, then a main thread that never returns.
_HUNG_DAEMON = textwrap.dedent(
    """
    import sys, threading
    from vflcore.runtime import crash_trace, daemon
    crash_trace.STOP_DEADLINE_S = 0.5
    crash_trace.enable_crash_traces(None)
    signals = daemon.ShutdownSignals(lambda: None).install()

    def held_by_a_peer_that_is_gone():
        print("ready", flush=True)
        threading.Event().wait()

    held_by_a_peer_that_is_gone()
    """
)

#: The child's stop ends at once: the documented exit code, no deadline output (the deadline is
#: long enough for a loaded machine's interpreter exit).
_PROMPT_DAEMON = textwrap.dedent(
    """
    import sys, threading
    from vflcore.runtime import crash_trace, daemon
    crash_trace.STOP_DEADLINE_S = 30
    crash_trace.enable_crash_traces(None)
    stopped = threading.Event()
    signals = daemon.ShutdownSignals(stopped.set).install()
    print("ready", flush=True)
    while not stopped.wait(0.05):
        pass
    sys.exit(signals.exit_code)
    """
)


def _run_until_ready(program: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n", child.communicate()
    return child


def test_a_stop_that_hangs_writes_every_stack_and_exits_1() -> None:
    child = _run_until_ready(_HUNG_DAEMON)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 1, err
    assert "Timeout (0:00:00.500000)!" in err, err
    assert "held_by_a_peer_that_is_gone" in err, err


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_prompt_stop_keeps_its_exit_code_and_writes_nothing(signum: int, code: int) -> None:
    child = _run_until_ready(_PROMPT_DAEMON)
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)
    assert child.returncode == code, err
    assert "Timeout" not in err, err
