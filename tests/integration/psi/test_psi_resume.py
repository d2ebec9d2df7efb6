"""A PSI that a party's restart interrupts resumes at the last chunk the server stored, not from the start.

``vfl-server`` and two ``vfl-client`` daemons run as OS processes over mTLS (``vfltesting.service``),
with ``[psi] chunk_ids = 32`` so that the digits job (1,500 to 1,600 IDs a party) has about 50
chunks a stream. Passive party 3, or the server itself, is killed (-9) once the server has
stored some of party 3's chunks (frozen first, ``frozen_when``, so that PSI cannot
finish in between), and started again: the server's and the party's logs show the
exchange resumed at the stored chunks, fewer chunks were computed than a whole exchange has,
every party ends with the aligned IDs the data holds, and no PSI secret is left on disk.
"""

from __future__ import annotations

import csv
import stat
from pathlib import Path

import pytest

from vflclient import JobClient
from vflcore.psi.matching import MATCH_BYTES
from vflcore.psi.progress import SECRET_FILE
from vfltesting.freeze import frozen_when
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, finish_job, job_document, log_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: 32 IDs a chunk, not 16: half the chunk round trips (6.2 -> 4.8 CPU-s a run, measured 2026-11-29), the
#: kill as far into the stream (a tenth).
CHUNK = 32
#: Party 3's chunks the server must hold before the kill: well inside the ~48 of its stream.
KILL_AFTER = 5


def _stored(psi_folder: Path, party: int) -> int:
    """Chunks of ``party``'s blinded IDs the server has stored so far (its ``from-<party>.bin``)."""
    return sum(path.stat().st_size for path in psi_folder.glob(f"progress-*/from-{party}.bin")) // (CHUNK * MATCH_BYTES)


def _ids(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as fh:
        return [row[0] for row in list(csv.reader(fh))[1:]]


class TestRestartMidPsi:
    @pytest.mark.parametrize("killed", ["party-3", "server"])
    def test_psi_resumes_at_the_stored_chunks(self, killed: str, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
        """kill -9 mid-PSI, then a restart: the exchange goes on from the stored chunks, to the same result."""
        run = ServiceRun(
            tmp_path,
            pki,
            digits_data,
            serving=False,
            server_settings={"party_timeout_s": 60, "heartbeat_timeout_s": 3},
            client_settings={"heartbeat_s": 0.3},
            server_tables={"psi": {"chunk_ids": CHUNK}},
        )
        job_id = "psi-resume"
        runs = tmp_path / "runs" / job_id
        psi1, psi3 = runs / "party-1" / "psi", runs / "party-3" / "psi"
        run.start_server()
        run.start_clients()
        try:
            with JobClient(run.address, tls=run.pki.operator_files("alice")) as jobs:
                jobs.submit(job_document(job_id, "splitnn", psi_only=True))
                with frozen_when(
                    run.procs[killed],
                    lambda: _stored(psi1, 3) >= KILL_AFTER,
                    lambda: any(psi3.glob("alignment-*")),
                    f"{KILL_AFTER} stored chunks of party 3, PSI unfinished",
                ):
                    run.kill(killed)
            stored = _stored(psi1, 3)
            for psi in (psi1, psi3):  # kept for the restart, each party's own
                (secret,) = psi.glob(f"progress-*/{SECRET_FILE}")
                assert stat.S_IMODE(secret.stat().st_mode) == 0o600
                assert stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
            if killed == "server":  # at once: run.kill returned after the process exited
                run.start_server(f"127.0.0.1:{run.port}")
            else:
                run.start_client(3)
            with JobClient(run.address, tls=run.pki.operator_files("alice")) as jobs:
                finish_job(jobs, run, job_id)
        finally:
            run.close()
        resumed = log_events(run.logs["server"], "psi_resumed")
        assert resumed, "the server did not resume the exchange"
        assert resumed[-1]["parties"]["3"]["uploads"] >= stored - 1, (resumed[-1], stored)
        exchanged = log_events(run.logs["server"], "psi_exchanged")
        assert len(exchanged) == 1, exchanged  # the interrupted run never got there
        assert 0 < exchanged[0]["chunks_computed"] < exchanged[0]["chunks_total"], exchanged[0]
        of_uploads = resumed[-1]["parties"]["3"]["of_uploads"]
        assert exchanged[0]["streams"]["from-3"] <= of_uploads - (stored - 1), (exchanged[0], of_uploads)
        party_resumed = log_events(run.logs["party-3"], "psi_resumed")
        assert party_resumed and party_resumed[-1]["uploads"] >= stored - 1, party_resumed
        common = set.intersection(*(set(_ids(digits_data / f"party{p}.csv")) for p in (1, 2, 3)))
        expected = sorted(common, key=lambda value: value.encode("utf-8"))
        for party in (1, 2, 3):
            assert _ids(runs / f"party-{party}" / "aligned_ids.csv") == expected, party
            assert not any((runs / f"party-{party}" / "psi").glob("progress-*")), f"party {party} kept PSI secrets"
