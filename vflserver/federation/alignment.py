"""The active party's half of ID alignment: ECDH-PSI in a star with every passive party.

Per passive party k the active party receives k's blinded IDs p_k·H(x), blinds them again, and
gets back its own blinded IDs a·H(y) blinded by k. Matching the two double-blinded lists tells
the active party which of its IDs k holds: the active party learns every pairwise intersection
(its own IDs ∩ each party's IDs), and that is all. It then intersects those, orders the common
IDs by their bytes (an order every party can recompute from IDs it already holds), and tells
each passive party which of its uploaded positions are in, in that order. See docs/psi.md.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from vflcore.data.id_arrays import fixed_width
from vflcore.data.tables import PartyTable, aligned_digest, ids_digest, select_rows
from vflcore.errors import EmptyIntersection as EmptyIntersection  # re-exported: defined in vflcore.errors
from vflcore.errors import JobAborted
from vflcore.psi import BlindingKey, make_dst
from vflcore.psi.blinding import blinder_for
from vflcore.psi.cache import alignment_key, load_alignment, load_pairwise, save_alignment
from vflcore.psi.matching import MATCH_BYTES, match, truncate
from vflcore.runtime.logs import progress_callback
from vflcore.wire.names import (
    PSI_ALIGNED_DIGEST,
    PSI_CLIENT_BLINDED,
    PSI_MEMBERS,
    PSI_SERVER_BLINDED,
    PSI_SERVER_DOUBLE_BLINDED,
)
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Align
from vflserver.federation.passive_parties import PassiveParties

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class AlignmentResult:
    """The active party's aligned table and what the run cost."""

    table: PartyTable
    reused: bool
    #: party -> size of (active IDs ∩ that party's IDs), as PSI found them; when the alignment is
    #: reused, as saved with it (empty only for an alignment saved before they were kept).
    pairwise: dict[int, int]
    #: The whole alignment phase: the exchange (or the check of a saved alignment) and, once
    #: ``ActiveParty.align`` has built the job's models on the aligned rows, that too.
    seconds: float
    #: The exchange alone (or the check of a saved alignment): PSI's own cost.
    psi_seconds: float = 0.0


def align_active(
    table: PartyTable, passive: PassiveParties, *, cache_dir: Path, workers: int | None = None
) -> AlignmentResult:
    """Run (or reuse) the alignment with every joined passive party; returns the aligned table."""
    started = time.perf_counter()
    job_id = passive.job.job_id
    digest = ids_digest(table.ids)
    members = {p: passive.member(p) for p in passive.job.passive_parties}
    key = alignment_key(job_id, {1: digest, **{p: m.id_set_digest for p, m in members.items()}})
    saved = load_alignment(cache_dir, key, digest)
    reuse = saved is not None and all(key in m.cached_alignments for m in members.values())
    passive.dispatch(lambda tid: Align(tid, key, run_psi=not reuse))
    passive.expect(PSI_ALIGNED_DIGEST, 0, 0, (32,), "uint8")
    if reuse:
        assert saved is not None
        aligned_ids = saved
        pairwise = load_pairwise(cache_dir, key, digest)
        log.info("alignment_reused", rows=len(aligned_ids))
    else:
        aligned_ids, pairwise = _run_psi(table.ids, passive, workers)
        save_alignment(cache_dir, key, fixed_width(aligned_ids), digest, pairwise)  # the cache asks for dtype=str
    want = aligned_digest(aligned_ids)
    for party, got in passive.gather(PSI_ALIGNED_DIGEST, 0, 0, timeout_s=passive.psi_timeout_s).items():
        if not np.array_equal(got, want):
            raise JobAborted(f"party {party} aligned its rows differently from the active party; PSI must run again")
    aligned = select_rows(table, aligned_ids)
    seconds = time.perf_counter() - started
    return AlignmentResult(aligned, reuse, pairwise, seconds, psi_seconds=seconds)


def _run_psi(ids: np.ndarray, passive: PassiveParties, workers: int | None) -> tuple[np.ndarray, dict[int, int]]:
    job_id = passive.job.job_id
    parties = list(passive.job.passive_parties)
    log.info("psi_started", own_ids=len(ids), parties=parties)
    for party in parties:
        count = passive.member(party).id_count
        passive.expect(PSI_CLIENT_BLINDED, 0, 0, (count, 32), "uint8", party=party)
    passive.expect(PSI_SERVER_DOUBLE_BLINDED, 0, 0, (len(ids), MATCH_BYTES), "uint8")
    order = np.random.default_rng(secrets.randbits(128)).permutation(len(ids))
    shuffled = ids[order]
    key = BlindingKey.generate()
    twice_theirs: dict[int, np.ndarray] = {}
    largest = max([len(ids), *(passive.member(p).id_count for p in parties)])
    with blinder_for(largest, key, workers) as pool:
        mine = pool.hash_and_blind_packed(
            [str(v).encode("utf-8") for v in shuffled],
            make_dst(job_id),
            progress=progress_callback("PSI: blind own IDs"),
        )
        published = np.frombuffer(mine, np.uint8).reshape(-1, 32)
        for party in parties:
            passive.publish(party, TensorKey(job_id, 0, 0, PSI_SERVER_BLINDED), published)
        for party in parties:
            theirs = passive.gather_from(party, PSI_CLIENT_BLINDED, 0, 0, timeout_s=passive.psi_timeout_s)
            twice = pool.blind_packed(
                [row.tobytes() for row in theirs], progress=progress_callback(f"PSI: party {party}")
            )
            twice_theirs[party] = truncate(np.frombuffer(twice, np.uint8).reshape(-1, 32))
    returned = passive.gather(PSI_SERVER_DOUBLE_BLINDED, 0, 0, timeout_s=passive.psi_timeout_s)
    positions: dict[int, dict[int, int]] = {}  # party -> {server shuffled index: party's upload index}
    pairwise: dict[int, int] = {}
    common: set[int] | None = None
    for party in parties:
        theirs_idx, ours_idx = match(twice_theirs[party], returned[party])
        positions[party] = dict(zip(ours_idx.tolist(), theirs_idx.tolist(), strict=True))
        pairwise[party] = len(ours_idx)
        common = set(ours_idx.tolist()) if common is None else common & set(ours_idx.tolist())
    common_idx = sorted(common or (), key=lambda j: str(shuffled[j]).encode("utf-8"))
    log.info("psi_matched", own_ids=len(ids), pairwise=pairwise, intersection=len(common_idx))
    if not common_idx:
        raise EmptyIntersection(
            f"the parties share no sample ID (pairwise overlaps with the active party: {pairwise}); "
            "check that every party uses the same ID column and format"
        )
    for party in parties:
        chosen = np.asarray([positions[party][j] for j in common_idx], dtype=np.int64)
        passive.publish(party, TensorKey(job_id, 0, 0, PSI_MEMBERS), chosen)
    return shuffled[np.asarray(common_idx, dtype=np.int64)], pairwise
