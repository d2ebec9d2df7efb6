"""The two parties' inputs: an ``id``-only CSV each, half the IDs shared, and the mTLS certificates.

They are made once per bench and shared by every run (``--compare-workers`` runs twice), and none
of it is timed as PSI: the report states what reading one CSV costs each daemon before its PSI.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from vfltesting.pki import issue_pki

PARTY = 2


def ids_for(n: int) -> tuple[list[str], list[str]]:
    """Server IDs 0..n-1, client IDs n/2..3n/2-1: n/2 shared."""
    return [f"user-{i:07d}" for i in range(n)], [f"user-{i:07d}" for i in range(n // 2, n + n // 2)]


def write_id_csv(path: Path, ids: list[str], seed: int) -> None:
    """Rows shuffled with a per-party seed, so the parties' files are not in the same order."""
    order = np.random.default_rng(seed).permutation(len(ids))
    path.write_text("id\n" + "\n".join(ids[i] for i in order) + "\n", encoding="utf-8")


def prepare_inputs(root: Path, n: int) -> tuple[Path, Path]:
    """(certificates folder, data folder) under ``root``, after timing one ``read_party_csv``.

    The read is timed here because each daemon pays it before its PSI starts: the server-reported
    PSI seconds exclude it, the process wall includes it.
    """
    certs, data = root / "certs", root / "data"
    data.mkdir()
    issue_pki(certs, (PARTY,))
    started = time.perf_counter()
    server_ids, client_ids = ids_for(n)
    write_id_csv(data / "party1.csv", server_ids, seed=1)
    write_id_csv(data / f"party{PARTY}.csv", client_ids, seed=2)
    del server_ids, client_ids
    print(f"data: 2 CSVs of {n:,} IDs (id column only) written in {time.perf_counter() - started:.1f} s (untimed)")
    from vflcore.data.tables import read_party_csv

    started = time.perf_counter()
    table = read_party_csv(data / "party1.csv")
    read_s = time.perf_counter() - started
    assert table.num_rows == n and table.features.shape == (n, 0), (table.num_rows, table.features.shape)
    del table
    finding = "  FINDING: slower than 10 s" if read_s > 10 else ""
    print(
        f"read_party_csv of one {n:,}-row id-only CSV: {read_s:.1f} s, features shape ({n}, 0) "
        f"(each daemon pays this before PSI; excluded from the PSI seconds){finding}",
        flush=True,
    )
    return certs, data
