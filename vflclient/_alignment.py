"""A passive party's half of ID alignment: ECDH-PSI with the active party, in chunks, or a saved result.

What this party sends: its IDs hashed to the curve and blinded with a fresh secret key, in a
secret order (``vflcore.psi.order``), chunk by chunk; each chunk of the active party's blinded
IDs blinded a second time, truncated. What it learns: which of its own IDs are in the
intersection of every party's IDs, and their agreed order (the IDs sorted). It learns nothing
about the other parties' IDs outside that intersection except how many the active party holds.
See docs/explanation/psi.md.

Two streams run at once (``side_by_side``), each computing chunks ahead of what it sends
(``ahead``): **up** sends this party's chunks, waiting before chunk c for the active party's word
that it took chunk c - WINDOW (so a slow active party is never flooded); **down** fetches each of
the active party's chunks, blinds it and sends it back. The memory this takes is a few chunks,
whatever the number of IDs.

While PSI runs, this party keeps its secrets in a 0600 file under its ``psi`` folder
(``vflcore.psi.progress``): if it restarts, it tells the server at Join, and the server resumes
the exchange at the chunks it already has (``PsiPlan``). The file is deleted once this party
has its aligned IDs.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import structlog

from vflcore.data.tables import PartyTable, aligned_digest, ids_digest, select_rows, take_rows
from vflcore.errors import JobAborted
from vflcore.psi import make_dst
from vflcore.psi.cache import load_alignment, save_alignment
from vflcore.psi.chunks import AHEAD, WINDOW, Chunking, id_bytes, packed_points, point_list
from vflcore.psi.hash_to_curve import U_BYTES
from vflcore.psi.intersection import is_strictly_increasing
from vflcore.psi.matching import truncate
from vflcore.psi.pipeline import each_ahead, side_by_side
from vflcore.psi.progress import PsiSecrets, discard, load_secrets, progress_dir, save_secrets
from vflcore.psi.ray_blinding import blinder_on
from vflcore.runtime.compute import LOCAL, ComputeEngine
from vflcore.wire.links import ServerLink
from vflcore.wire.names import (
    PSI_ALIGNED_DIGEST,
    PSI_CLIENT_BLINDED,
    PSI_CLIENT_TAKEN,
    PSI_MEMBERS,
    PSI_SERVER_BLINDED,
    PSI_SERVER_DOUBLE_BLINDED,
)
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Align, PsiPlan

log = structlog.get_logger(__name__)


def align_passive(
    table: PartyTable,
    job_id: str,
    task: Align,
    link: ServerLink,
    *,
    cache_dir: Path,
    workers: int | None = None,
    engine: ComputeEngine = LOCAL,
    abandon: threading.Event | None = None,
) -> PartyTable:
    """This party's rows, restricted to the common IDs and put in the agreed order.

    ``abandon`` set (the daemon is stopping) ends a running PSI at once (``side_by_side``).
    """
    digest = ids_digest(table.ids)
    aligned_ids = load_alignment(cache_dir, task.alignment_key, digest) if not task.run_psi else None
    if aligned_ids is None:
        if not task.run_psi:
            raise JobAborted("the server expected a saved alignment this party no longer has; restart the server")
        if task.psi is None:
            raise JobAborted("the server asked for PSI without its chunking; it runs an older version: upgrade it")
        folder = progress_dir(cache_dir, task.alignment_key)
        rows = _run_psi(table.ids, job_id, task.psi, link, workers, folder, engine, abandon)
        aligned = take_rows(table, rows)  # PSI knows each aligned ID's row: no lookup
        if not is_strictly_increasing(aligned.ids):
            raise JobAborted("the server's intersection is not in the agreed order (sorted, distinct IDs)")
        log.info("psi_done", own_ids=len(table.ids), server_ids=task.psi.server_ids, intersection=aligned.num_rows)
        link.send(TensorKey(job_id, 0, 0, PSI_ALIGNED_DIGEST), aligned_digest(aligned.ids))
        # Filed once the server has its answer, which it waits for (seconds at 8M IDs). A crash in
        # between loses only the file: the next job finds no saved alignment here and runs PSI.
        save_alignment(cache_dir, task.alignment_key, aligned.ids, digest)
        discard(folder)
        return aligned
    log.info("alignment_reused", rows=len(aligned_ids))
    link.send(TensorKey(job_id, 0, 0, PSI_ALIGNED_DIGEST), aligned_digest(aligned_ids))
    return select_rows(table, aligned_ids)


def _secrets_for(plan: PsiPlan, folder: Path) -> PsiSecrets:
    """The secrets kept for this exchange when the server resumes it; fresh ones (saved first) otherwise."""
    if plan.resume:
        kept = load_secrets(folder)
        if kept is None:
            raise JobAborted(
                f"the server resumes PSI with the secrets this party kept in {folder}, which are gone; "
                "restart the server's job so that PSI starts afresh"
            )
        return kept
    discard(folder)
    fresh = PsiSecrets.generate()
    save_secrets(folder, fresh)  # before any value blinded with it leaves this party
    return fresh


def _run_psi(
    ids: np.ndarray,
    job_id: str,
    plan: PsiPlan,
    link: ServerLink,
    workers: int | None,
    folder: Path,
    engine: ComputeEngine = LOCAL,
    abandon: threading.Event | None = None,
) -> np.ndarray:
    """The exchange with the server (resumed where it was interrupted): this party's rows of the aligned IDs."""
    secrets = _secrets_for(plan, folder)
    order = secrets.order(len(ids))
    mine, theirs = Chunking(len(ids), plan.chunk_ids), Chunking(plan.server_ids, plan.chunk_ids)
    if plan.upload_from or plan.download_from:
        log.info(
            "psi_resumed",
            uploads=plan.upload_from,
            of_uploads=mine.count,
            downloads=plan.download_from,
            of_downloads=theirs.count,
        )
    dst = make_dst(job_id)
    stop = threading.Event()

    def key(name: str, chunk: int) -> TensorKey:
        return TensorKey(job_id, 0, chunk, name)

    with blinder_on(engine, max(len(ids), plan.server_ids), secrets.blinding, workers) as pool:

        def blind_mine(chunk: int) -> np.ndarray:
            rows = order.span(*mine.bounds(chunk))
            return packed_points(pool.hash_and_blind_packed(id_bytes(ids, rows), dst))

        def blind_theirs(chunk: int) -> np.ndarray:
            points = link.receive(key(PSI_SERVER_BLINDED, chunk))
            expected = (theirs.length(chunk), U_BYTES)
            if points.dtype != np.uint8 or points.shape != expected:
                raise JobAborted(
                    f"the server sent chunk {chunk} of its blinded IDs as {points.dtype} {list(points.shape)}; "
                    f"expected uint8 {list(expected)}"
                )
            return truncate(packed_points(pool.blind_packed(point_list(points))))

        def up() -> None:
            chunks = range(plan.upload_from, mine.count)
            for chunk, points in each_ahead(blind_mine, chunks, AHEAD):
                if stop.is_set():
                    return
                if chunk - WINDOW >= plan.upload_from:
                    link.receive(key(PSI_CLIENT_TAKEN, chunk - WINDOW))
                link.send(key(PSI_CLIENT_BLINDED, chunk), points)

        def down() -> None:
            chunks = range(plan.download_from, theirs.count)
            for chunk, twice in each_ahead(blind_theirs, chunks, AHEAD):
                if stop.is_set():
                    return
                link.send(key(PSI_SERVER_DOUBLE_BLINDED, chunk), twice)

        try:
            side_by_side({"up": up, "down": down}, stop, abandon=abandon)
        except BaseException:
            link.cancel_downloads()  # a stream left behind must not take the resumed PSI's chunk
            raise
    members = link.receive(key(PSI_MEMBERS, 0))
    if members.dtype != np.int64 or members.ndim != 1:
        raise JobAborted(
            f"the server sent member positions of {members.dtype} {list(members.shape)}; expected int64 [n]"
        )
    if len(members) and (members.min() < 0 or members.max() >= len(ids)):
        raise JobAborted(f"the server sent member positions outside this party's {len(ids)} IDs")
    rows: np.ndarray = order.rows(members)
    return rows
