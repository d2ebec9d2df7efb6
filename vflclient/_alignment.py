"""A passive party's half of ID alignment: ECDH-PSI with the active party, or a saved result.

What this party sends: its IDs hashed to the curve and blinded with a fresh secret key, in a
random order; the active party's blinded IDs blinded a second time, truncated. What it learns:
which of its own IDs are in the intersection of every party's IDs, and their agreed order (the
IDs sorted). It learns nothing about the other parties' IDs outside that intersection except
how many the active party holds. See docs/psi.md.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import structlog

from vflcore.data.id_arrays import fixed_width
from vflcore.data.tables import PartyTable, aligned_digest, ids_digest, select_rows
from vflcore.errors import JobAborted
from vflcore.psi import BlindingKey, make_dst
from vflcore.psi.blinding import blinder_for
from vflcore.psi.cache import load_alignment, save_alignment
from vflcore.psi.matching import truncate
from vflcore.runtime.logs import progress_callback
from vflcore.wire.links import ServerLink
from vflcore.wire.names import (
    PSI_ALIGNED_DIGEST,
    PSI_CLIENT_BLINDED,
    PSI_MEMBERS,
    PSI_SERVER_BLINDED,
    PSI_SERVER_DOUBLE_BLINDED,
)
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Align

log = structlog.get_logger(__name__)


def align_passive(
    table: PartyTable, job_id: str, task: Align, link: ServerLink, *, cache_dir: Path, workers: int | None = None
) -> PartyTable:
    """This party's rows, restricted to the common IDs and put in the agreed order."""
    digest = ids_digest(table.ids)
    aligned_ids = load_alignment(cache_dir, task.alignment_key, digest) if not task.run_psi else None
    if aligned_ids is None:
        if not task.run_psi:
            raise JobAborted("the server expected a saved alignment this party no longer has; restart the server")
        aligned_ids = _run_psi(table.ids, job_id, link, workers)
        save_alignment(cache_dir, task.alignment_key, fixed_width(aligned_ids), digest)  # the cache asks for dtype=str
    else:
        log.info("alignment_reused", rows=len(aligned_ids))
    link.send(TensorKey(job_id, 0, 0, PSI_ALIGNED_DIGEST), aligned_digest(aligned_ids))
    return select_rows(table, aligned_ids)


def _run_psi(ids: np.ndarray, job_id: str, link: ServerLink, workers: int | None) -> np.ndarray:
    key = BlindingKey.generate()
    # A random upload order: the server later learns which positions are in the intersection,
    # and positions in a sorted list would tell it where this party's other IDs fall.
    order = np.random.default_rng(secrets.randbits(128)).permutation(len(ids))
    shuffled = ids[order]
    dst = make_dst(job_id)
    with blinder_for(len(ids), key, workers) as pool:
        mine = pool.hash_and_blind_packed(
            [str(v).encode("utf-8") for v in shuffled], dst, progress=progress_callback("PSI: blind own IDs")
        )
        link.send(TensorKey(job_id, 0, 0, PSI_CLIENT_BLINDED), np.frombuffer(mine, np.uint8).reshape(-1, 32))
        theirs = link.receive(TensorKey(job_id, 0, 0, PSI_SERVER_BLINDED))
        points = [row.tobytes() for row in theirs]
        twice = pool.blind_packed(points, progress=progress_callback("PSI: blind server IDs"))
    link.send(
        TensorKey(job_id, 0, 0, PSI_SERVER_DOUBLE_BLINDED), truncate(np.frombuffer(twice, np.uint8).reshape(-1, 32))
    )
    members = link.receive(TensorKey(job_id, 0, 0, PSI_MEMBERS))
    if members.dtype != np.int64 or members.ndim != 1:
        raise JobAborted(
            f"the server sent member positions of {members.dtype} {list(members.shape)}; expected int64 [n]"
        )
    if len(members) and (members.min() < 0 or members.max() >= len(shuffled)):
        raise JobAborted(f"the server sent member positions outside this party's {len(shuffled)} IDs")
    aligned: np.ndarray = shuffled[members]
    if any(a >= b for a, b in zip(aligned[:-1].tolist(), aligned[1:].tolist(), strict=True)):
        raise JobAborted("the server's intersection is not in the agreed order (sorted, distinct IDs)")
    log.info("psi_done", own_ids=len(ids), server_ids=len(theirs), intersection=len(aligned))
    return aligned
