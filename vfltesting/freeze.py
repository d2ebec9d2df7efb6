"""Stop a daemon inside a training epoch, and know it is inside, on any CPU.

A timed sleep ("half of the last epoch's time"), then a kill, once landed in the next epoch on a
loaded 2-core CI machine: the test process lost the CPU for longer than the rest of the epoch.
Here the party is frozen first (SIGSTOP) and only then checked: frozen, it can neither finish
the epoch nor save its checkpoint, so what the check sees still holds when the caller kills
(or cuts, or kills the server beside it). A freeze that came too late thaws and tries the
next epoch, so the test still kills inside an epoch, just a later one, and says which.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

from vflclient import JobClient
from vflcore.data.checkpoints import epoch_path
from vfltesting.localrun import Daemon
from vfltesting.service import ServiceRun, wait_until


@contextlib.contextmanager
def frozen_process(daemon: Daemon) -> Iterator[None]:
    """``daemon`` stopped (SIGSTOP) inside the block; thawed on leaving it, unless the block killed it."""
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        if daemon.poll() is None:
            os.kill(daemon.pid, signal.SIGCONT)


@contextlib.contextmanager
def frozen_when(
    daemon: Daemon,
    ready: Callable[[], bool],
    too_late: Callable[[], bool],
    what: str,
    *,
    timeout_s: float = 120.0,
    slice_s: float = 0.005,
) -> Iterator[None]:
    """``daemon`` frozen (SIGSTOP) at a moment when ``ready()`` holds and ``too_late()`` does not.

    Why in slices: a wait for ``ready`` and then a freeze (or a kill) lets the daemon run on in
    between, and on a fast host it ran past the moment a test meant to catch (a PSI finished, a
    distillation ended: "the kill came too late"). Here the daemon runs ``slice_s`` at a time and
    is looked at only while frozen, so what the block sees still holds when it kills; it can get
    past the moment only within one slice, and then this fails naming ``what``. The daemon is
    thawed on leaving the block unless the block killed it.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        with frozen_process(daemon):
            if too_late():
                raise AssertionError(f"{what}: the daemon got past it within one {slice_s} s slice")
            if ready():
                yield
                return
        if daemon.poll() is not None:
            raise AssertionError(f"{what}: the daemon exited with code {daemon.returncode} first")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s:.0f} s")
        time.sleep(slice_s)


def frozen(run: ServiceRun, party: str) -> contextlib.AbstractContextManager[None]:
    """``party`` of ``run`` stopped inside the block (``frozen_process``)."""
    return frozen_process(run.procs[party])


@contextlib.contextmanager
def frozen_inside_epoch(
    run: ServiceRun,
    jobs: JobClient,
    job_id: str,
    done: int,
    *,
    party: str = "party-3",
    fraction: float = 0.25,
) -> Iterator[int]:
    """Yield ``d >= done`` with ``party`` frozen inside epoch ``d + 1`` (from 0: ``d``) of ``job_id``.

    Inside means: the server had recorded ``d`` of the job's epochs, and the party has not
    saved its checkpoint of epoch ``d + 1``. The freeze lands about ``fraction`` of an epoch's
    time into the epoch, so some steps in, though that part is timed, not checked. The server
    may still record epoch ``d + 1`` (never more) if the party froze after serving that
    epoch's last step and evaluation but before its checkpoint. The party is thawed on leaving
    the block unless the caller killed it there. Fails, naming the job, when every epoch was
    missed.
    """
    epochs = jobs.get(job_id).epochs
    folder = run.root / "runs" / job_id / party
    while done < epochs:
        _wait_for_epochs(run, jobs, job_id, done)
        time.sleep(jobs.get(job_id).history[-1].seconds * fraction if done else 0.0)
        with frozen(run, party):
            seen = jobs.get(job_id).epochs_done
            if seen < epochs and not epoch_path(folder, seen).exists():
                yield seen
                return
        done = seen + 1
    raise AssertionError(f"{party} could not be frozen inside any epoch of {job_id}")


def _wait_for_epochs(run: ServiceRun, jobs: JobClient, job_id: str, done: int) -> None:
    # an RPC a look: every 50 ms (``wait_until``); the freeze after it is placed by time anyway
    wait_until(lambda: jobs.get(job_id).epochs_done >= done, f"epoch {done} of {job_id}", run, every_s=0.05)
