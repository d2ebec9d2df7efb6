"""The recovery tests' recipe: daemons with short limits, their digits job, a kill -9 and a restart.

``tests/integration/recovery/`` and the embedding-privacy resume test run the same steps: start
``vfl-server`` and two ``vfl-client`` daemons as processes (``ServiceRun``) with limits short
enough that a frozen party is noticed in seconds, submit the digits job, kill a daemon inside an
epoch, start it again, and compare what the job left on disk (``vfltesting.recovery``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vflclient import JobClient
from vflcore.data.checkpoints import checkpoint_positions, position_path
from vflcore.job.schedule import Position
from vfltesting.freeze import frozen_inside_epoch, frozen_when
from vfltesting.pki import Pki
from vfltesting.recovery import JobOutcome, job_outcome
from vfltesting.service import ServiceRun, job_document, wait_until

__all__ = [
    "CLIENT",
    "EPOCHS",
    "EVERY_STEPS",
    "JOB",
    "LOCAL_STEPS",
    "SERVER",
    "epochs_done",
    "fault_document",
    "fault_job_id",
    "kill_after_step",
    "kill_inside_epoch",
    "operator_client",
    "restart_after_kill",
    "run_outcome",
    "service_with_short_limits",
]

#: Three epochs: every fault lands in epoch 2 (or, on a slow machine, 3) and leaves training after
#: it to resume into; the passive-party test kills between epochs 2 and 3. A fourth epoch added
#: steps before and after each fault and checked nothing more.
EPOCHS = 3
#: Batches of 64: 15 steps an epoch (936 training rows, the last batch of 40), enough to be frozen
#: and killed inside one (``frozen_inside_epoch`` and the checkpoint waits find the moment by
#: events, not by time, so a short epoch is as good as a long one). Each step is a round of gRPC
#: calls over TLS on every party, so the job's CPU goes with its steps. The recovery files were a
#: quarter of the suite's CPU on 2 cores; 3 epochs at 32 (90 steps) instead of 4 at 16 (236) took
#: test_recovery.py from 164 to 115 CPU-s (user+sys, pytest -n 0, measured 2026-11-29). Batches
#: of 64 (45 steps) instead of 32: a SplitNN job 2.1 CPU-s instead of 2.6, VIMADMM's 3.2 instead
#: of 4.9 (three daemons); test_recovery.py 93 -> 74 CPU-s (measured 2026-11-29). What is left of
#: a job is mostly its fixed part: PSI, the ONNX export, the first job's imports in a restarted daemon.
JOB = {"batch_size": 64, "join_timeout_s": 60}
#: Short limits, so that a frozen party is noticed in seconds, not minutes.
SERVER = {"party_timeout_s": 60, "heartbeat_timeout_s": 3}
CLIENT = {"heartbeat_s": 0.3}
#: VIMADMM's and VIMADMM-J's local steps per batch (τ), fewer than their default 10. What is
#: checked here is the resume, which τ does not change (2 is still several steps on one answer);
#: at 10 a VIMADMM job cost 21 CPU-s against SplitNN's 3.4 (5 epochs, measured 2026-11-28).
#: FedBCD's Q likewise, 2 instead of its default 5: 2.3 CPU-s a job instead of 3.7 (three daemons,
#: measured 2026-11-29), and still more than one update on one stale gradient.
LOCAL_STEPS = {"vimadmm": 2, "vimadmm_j": 2, "fedbcd": 2}
#: Checkpoints inside epochs, every 12 steps, in the tests that kill between two of them: with
#: 15 steps an epoch, steps 12, 24 and 36 are 12, 9 and 6 batches into epochs 1, 2 and 3, none
#: at an epoch's end.
EVERY_STEPS = 12


def fault_job_id(algorithm: str, tag: str) -> str:
    """``tag``-``algorithm``, with dashes: a job id per algorithm and per test."""
    return f"{tag}-{algorithm.replace('_', '-')}"


def fault_document(job_id: str, algorithm: str, *, epochs: int = EPOCHS, **job: Any) -> dict[str, dict[str, Any]]:
    """The digits job of these tests (``JOB``, then ``job``); VIMADMM's with ``LOCAL_STEPS``."""
    options = {"local_steps": LOCAL_STEPS[algorithm]} if algorithm in LOCAL_STEPS else {}
    settings = {**JOB, **job}
    settings["algorithm_options"] = {**options, **settings.get("algorithm_options", {})}
    return job_document(job_id, algorithm, epochs=epochs, **settings)


def service_with_short_limits(root: Path, pki: Pki, data: Path, **settings: Any) -> ServiceRun:
    """The server and both passive daemons started under ``root``, with ``SERVER`` and ``CLIENT``'s limits.

    ``settings["server"]`` and ``settings["client"]`` add to those limits; the rest goes to ``ServiceRun``.
    """
    root.mkdir(parents=True, exist_ok=True)
    run = ServiceRun(
        root,
        pki,
        data,
        serving=False,
        server_settings={**SERVER, **settings.pop("server", {})},
        client_settings={**CLIENT, **settings.pop("client", {})},
        **settings,
    )
    run.start_server()
    run.start_clients()
    return run


def operator_client(run: ServiceRun, pki: Pki) -> JobClient:
    """A ``JobClient`` for ``run``'s service, as operator "alice"."""
    return JobClient(run.address, tls=pki.operator_files("alice"))


def run_outcome(run: ServiceRun, job_id: str) -> JobOutcome:
    """What the finished job ``job_id`` left under ``run``'s runs folder."""
    return job_outcome(run.root / "runs", job_id)


def epochs_done(jobs: JobClient, job_id: str) -> int:
    """The epochs the service reports done for ``job_id``."""
    return jobs.get(job_id).epochs_done


def kill_inside_epoch(
    run: ServiceRun, jobs: JobClient, job_id: str, done: int, name: str = "party-3", fraction: float = 0.25
) -> int:
    """kill -9 of ``name`` inside epoch ``done + 1`` or, if the machine was too slow for that, a later
    one; returns the epochs done at the kill. Frozen first, so the check holds at the kill."""
    with frozen_inside_epoch(run, jobs, job_id, done, party=name, fraction=fraction) as killed_after:
        run.kill(name)
    return killed_after


def kill_after_step(run: ServiceRun, job_id: str, position: Position, name: str = "party-3") -> None:
    """kill -9 of ``name`` once every party of ``run`` has saved ``job_id``'s checkpoint of ``position``
    and before ``name`` saved a newer one; then start it again (``restart_after_kill``).

    A resumed job goes on from the newest checkpoint every party holds (``roll_back``), so the
    kill waits for all of them, not a timed pause after two of them: a ``sleep(0.05)`` stood
    there. ``name`` is looked at frozen (``frozen_when``), so what was seen holds at the kill.
    """
    folders = [run.root / "runs" / job_id / f"party-{p}" for p in (1, *run.parties)]
    mine = run.root / "runs" / job_id / name
    saved = f"{job_id}'s checkpoint of {position} on {name}"
    wait_until(lambda: position_path(mine, position).exists(), saved, run)
    with frozen_when(
        run.procs[name],
        lambda: all(position_path(folder, position).exists() for folder in folders),
        lambda: checkpoint_positions(mine)[-1:] > [position],
        f"{job_id}'s checkpoint of {position} on every party, none newer on {name}",
    ):
        run.kill(name)
    restart_after_kill(run, name)


def restart_after_kill(run: ServiceRun, name: str) -> None:
    """Start ``name`` again after its kill -9, with no pause: none is needed, and none is waited out.

    ``run.kill`` returns once the process has exited, so its port is free. A passive daemon that
    comes back at once asks for a job while the server still counts it in the running one, which
    marks its old session lost there and then (``JobBoard._restarted``): the same resume as after a
    long absence. The pauses of 0.5 to 1 s that stood here explained neither (issue 40).
    """
    if name == "server":
        run.start_server(f"127.0.0.1:{run.port}")
    else:
        run.start_client(int(name.split("-")[1]))
