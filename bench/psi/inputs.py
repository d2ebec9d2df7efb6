"""The two parties' inputs: an ``id``-only CSV each, half the IDs shared, and the mTLS certificates.

They are made once per bench and shared by every run (``--compare-workers`` runs twice), and none
of it is timed as PSI: the report states what reading one CSV costs each daemon before its PSI.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class IdSets:
    """Server IDs 0 .. n - 1, client IDs ``first_client`` .. ``first_client + n - 1``; ``user-`` and ``width`` digits.

    The shared IDs are ``first_client`` .. n - 1; the intersection check streams them.
    """

    n: int
    first_client: int
    width: int = 7

    @classmethod
    def with_overlap(cls, n: int, shared: int) -> IdSets:
        return cls(n, n - shared, width=max(7, len(str(2 * n - shared - 1))))

    @property
    def shared(self) -> range:
        return range(self.first_client, self.n)

    def name(self, number: int) -> str:
        return f"user-{number:0{self.width}d}"


def write_numbered_csv(path: Path, ids: IdSets, first: int, seed: int, block: int = 1_000_000) -> None:
    """``ids.n`` IDs from ``first``, shuffled with ``seed``, written a block at a time (10M rows in bounded memory)."""
    order = np.random.default_rng(seed).permutation(ids.n) + first
    with path.open("w", encoding="utf-8") as fh:
        fh.write("id\n")
        for start in range(0, ids.n, block):
            fh.write("".join(f"user-{number:0{ids.width}d}\n" for number in order[start : start + block].tolist()))


def prepare_numbered_inputs(root: Path, ids: IdSets) -> tuple[Path, Path]:
    """(certificates folder, data folder) for ``ids``; nothing read back (a 10M-row read is what is measured)."""
    certs, data = root / "certs", root / "data"
    data.mkdir()
    issue_pki(certs, (PARTY,))
    started = time.perf_counter()
    write_numbered_csv(data / "party1.csv", ids, 0, seed=1)
    write_numbered_csv(data / f"party{PARTY}.csv", ids, ids.first_client, seed=2)
    print(
        f"data: 2 CSVs of {ids.n:,} IDs (id column only, {len(ids.shared):,} shared) written in "
        f"{time.perf_counter() - started:.1f} s (untimed)",
        flush=True,
    )
    return certs, data


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
