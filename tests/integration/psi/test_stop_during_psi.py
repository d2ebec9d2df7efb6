"""A passive daemon stopped in the middle of PSI leaves at once, without waiting for its PSI workers.

``vfl-server`` and party 2's ``vfl-client`` daemon run over mTLS. Party 2 holds 60,000 IDs, so
that it blinds on a pool of worker processes (``ParallelBlinder``); the server holds 2,000 of
them, which it blinds in-process: its own pool is not what this is about (on 60,000 IDs the
file cost 2 CPU-s more, its pool's workers counted; measured 2026-11-29). Both daemons are
forked (``vfltesting.forked``): the stop under test is ``main``'s (its handler, the stop that
abandons the pool, ``daemon.leave``'s ``os._exit``), the same in a forked daemon as in an exec'd
one, and its pool's forkserver and workers are party 2's children and grandchildren either way.
An exec'd service-mode ``vfl-client`` stopped by SIGTERM with exit 0 is ``make demo``'s
(run in CI after ``make test``: both passive daemons stopped, exit 0); party 2 exec'd here cost the
file 5.7 CPU-s more (24.4 against 18.6, paired runs, 2026-11-29). The job names party 2 alone:
a party 3 would only blind its own 60,000 IDs meanwhile. (Three exec'd daemons cost the file
26 CPU-s; 2026-11-29.) Once the server has stored a chunk from party 2 (its streams are
running), party 2's worker processes are frozen (SIGSTOP): a chunk they were blinding can never
finish. SIGTERM must still
end party 2 with its documented stop (exit 0 for the daemon), not at the stop deadline with a
stack dump (exit 1, ``vflcore.runtime.crash_trace.arm_stop_deadline``).

Before the fix, the stop waited for each stream's chunk in progress and then for the pool's
shutdown: 4 to 6 s on 100,000 IDs on an idle 2-core machine, more under load, and forever with
the workers stopped. The frozen workers make the test independent of the machine's speed.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

from vflclient import JobClient
from vflcore.psi.matching import MATCH_BYTES
from vfltesting.datasets import write_synthetic_split
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, job_document, log_events, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROWS = 60_000  # over SERIAL_BELOW (50,000): party 2 blinds on a process pool
#: The server's rows (the first of party 1's table): under SERIAL_BELOW, blinded in-process.
SERVER_ROWS = 2_000
CHUNK = 4096


def _grandchildren(pid: int) -> list[int]:
    """The processes two levels below ``pid``, from /proc: the PSI pool's workers, which its
    forkserver (a child) starts. The forkserver itself runs on: it reports a worker's death to the
    pool (a frozen one would not, and the pool would never learn of it)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended while we looked
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    children = {child for child, parent in parents.items() if parent == pid}
    return [child for child, parent in parents.items() if parent in children]


def _stored(psi_folder: Path, party: int) -> int:
    """Chunks of ``party``'s blinded IDs the server has stored so far."""
    return sum(path.stat().st_size for path in psi_folder.glob(f"progress-*/from-{party}.bin")) // (CHUNK * MATCH_BYTES)


def test_sigterm_in_psi_does_not_wait_for_the_workers(pki: Pki, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_synthetic_split(data, rows=ROWS, features_per_party=[2, 2], seed=0)
    party1 = data / "party1.csv"
    party1.write_text("".join(party1.read_text().splitlines(keepends=True)[: 1 + SERVER_ROWS]))
    run = ServiceRun(
        tmp_path / "service",
        pki,
        data,
        parties=(2,),
        serving=False,
        client_tables={"psi": {"workers": 2}},
        server_tables={"psi": {"chunk_ids": CHUNK}},
    )
    run.root.mkdir()
    job_id = "stop-in-psi"
    psi1 = run.root / "runs" / job_id / "party-1" / "psi"
    frozen: list[int] = []
    run.start_server()
    run.start_clients()
    try:
        with JobClient(run.address, tls=run.pki.operator_files("alice")) as jobs:
            # a "did not hang" guard: an exec'd daemon's start took over 60 s on a loaded 2-core host
            document = job_document(job_id, "splitnn", psi_only=True, passive_parties=[2], join_timeout_s=300)
            jobs.submit(document)
            wait_until(lambda: _stored(psi1, 2) >= 1, "a stored chunk of party 2", run)
        party2 = run.procs["party-2"]
        frozen = _grandchildren(party2.pid)
        assert frozen, "party 2 blinds without worker processes: the test needs its pool"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        assert not log_events(run.logs["party-2"], "psi_done"), "PSI had already finished: raise ROWS"
        party2.terminate()
        code = party2.wait(timeout=120)
        log = run.logs["party-2"].read_text(errors="replace")
        assert "Timeout (" not in log, log[-4000:]  # the stop deadline's stack dump: the stop hung
        assert code == 0, log[-4000:]
        assert not [pid for pid in frozen if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"], (
            "party 2's PSI workers outlived it"
        )
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        run.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"
