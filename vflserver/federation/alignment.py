"""The active party's half of ID alignment: ECDH-PSI in a star with every passive party, or a saved result.

Per passive party k the active party receives k's blinded IDs p_k·H(x), blinds them again, and
gets back its own blinded IDs a·H(y) blinded by k, all in chunks (``psi_exchange``). Matching the
two double-blinded lists tells the active party which of its IDs k holds: the active party learns
every pairwise intersection (its own IDs ∩ each party's IDs), and that is all. It then intersects
those, orders the common IDs by their bytes (an order every party can recompute from IDs it
already holds), and tells each passive party which of its uploaded positions are in, in that
order. See docs/explanation/psi.md.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from vflcore.data.id_arrays import digest_and_order
from vflcore.data.tables import PartyTable, aligned_digest, select_rows, take_rows
from vflcore.errors import EmptyIntersection as EmptyIntersection  # re-exported: defined in vflcore.errors
from vflcore.errors import JobAborted
from vflcore.psi.cache import alignment_key, load_alignment, load_pairwise, save_alignment
from vflcore.psi.chunks import DEFAULT_CHUNK_IDS
from vflcore.runtime.compute import LOCAL, ComputeEngine
from vflcore.wire.names import PSI_ALIGNED_DIGEST, PSI_MEMBERS
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Align, PsiPlan
from vflserver.federation.passive_parties import PassiveParties
from vflserver.federation.psi_exchange import ActiveExchange

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
    table: PartyTable,
    passive: PassiveParties,
    *,
    cache_dir: Path,
    workers: int | None = None,
    chunk_ids: int = DEFAULT_CHUNK_IDS,
    engine: ComputeEngine = LOCAL,
) -> AlignmentResult:
    """Run (or reuse) the alignment with every joined passive party; returns the aligned table.

    ``engine`` says where the curve arithmetic runs: this host, or the party's Ray cluster.
    An exchange that a restart interrupted resumes at its last chunk (``ActiveExchange.prepare``).
    ``psi_seconds`` times the protocol (the exchange, or the reuse, and the digest cross-check);
    ``seconds`` adds the digest of this party's ID set and selecting its aligned rows.
    """
    started = time.perf_counter()
    job_id = passive.job.job_id
    digest, id_order = digest_and_order(table.ids)  # the order again for PSI's aligned order
    members = {p: passive.members.member(p) for p in passive.job.passive_parties}
    key = alignment_key(job_id, {1: digest, **{p: m.id_set_digest for p, m in members.items()}})
    saved = load_alignment(cache_dir, key, digest)
    reuse = saved is not None and all(key in m.cached_alignments for m in members.values())
    passive.expect(PSI_ALIGNED_DIGEST, 0, 0, (32,), "uint8")
    psi_started = time.perf_counter()
    if reuse:
        assert saved is not None
        passive.dispatch(lambda tid: Align(tid, key, run_psi=False))
        aligned_ids = saved
        pairwise = load_pairwise(cache_dir, key, digest)
        log.info("alignment_reused", rows=len(aligned_ids))
        aligned = None  # its rows are looked up below, once every party agrees
        del id_order  # 40 MB at 10M IDs, not needed to reuse
    else:
        exchange = ActiveExchange(
            table.ids,
            passive,
            cache_dir=cache_dir,
            key=key,
            chunk_ids=chunk_ids,
            workers=workers,
            engine=engine,
            id_order=id_order,
        )
        rows, pairwise = _run_psi(exchange)
        aligned = take_rows(table, rows)  # PSI knows each aligned ID's row: no lookup
        aligned_ids = aligned.ids
        save_alignment(cache_dir, key, aligned_ids, digest, pairwise)
        exchange.finish()  # only now: a restart before this point resumes the exchange
    want = aligned_digest(aligned_ids)
    for party, got in passive.gather(PSI_ALIGNED_DIGEST, 0, 0, timeout_s=passive.psi_timeout_s).items():
        if not np.array_equal(got, want):
            raise JobAborted(f"party {party} aligned its rows differently from the active party; PSI must run again")
    psi_seconds = time.perf_counter() - psi_started
    if aligned is None:
        aligned = select_rows(table, aligned_ids)
    seconds = time.perf_counter() - started
    return AlignmentResult(aligned, reuse, pairwise, seconds, psi_seconds=psi_seconds)


def _run_psi(exchange: ActiveExchange) -> tuple[np.ndarray, dict[int, int]]:
    """The exchange with every party (resumed where one was interrupted): the aligned rows and pairwise overlaps."""
    passive, ids, key = exchange.passive, exchange.ids, exchange.key
    job_id = passive.job.job_id
    parties = list(passive.job.passive_parties)
    plans = exchange.prepare()
    log.info("psi_started", own_ids=len(ids), parties=parties, chunk_ids=exchange.chunk_ids, chunks=exchange.own.count)
    for party in parties:
        passive.dispatch(functools.partial(_align_task, key=key, plan=plans[party]), parties=[party])
    order = exchange.run()
    log.info("psi_matched", own_ids=len(ids), pairwise=order.pairwise, intersection=len(order.rows))
    if not len(order.rows):
        exchange.finish()
        raise EmptyIntersection(
            f"the parties share no sample ID (pairwise overlaps with the active party: {order.pairwise}); "
            "check that every party uses the same ID column and format"
        )
    for party in parties:
        passive.publish(party, TensorKey(job_id, 0, 0, PSI_MEMBERS), order.members[party])
    return order.rows, order.pairwise


def _align_task(task_id: int, *, key: bytes, plan: PsiPlan) -> Align:
    return Align(task_id, key, run_psi=True, psi=plan)
