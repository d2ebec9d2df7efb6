"""The active party's half of the chunked ECDH-PSI exchange with every passive party, resumable.

Streams, all at once and all feeding one blinder (docs/explanation/psi.md):

- **own**: the active party's IDs, in its secret upload order, hashed and blinded chunk by chunk
  (``a·H(y)``); each chunk goes to every passive party that still needs it, and each party's
  blinded copy of it (``p_k·a·H(y)``, 12 bytes an item) comes back and is appended to
  ``to-<k>.bin``. At most ``WINDOW`` chunks per party are out at once.
- **from k**, one per passive party: k's chunks ``p_k·H(x)`` as they arrive, each acknowledged
  at once (``PSI_CLIENT_TAKEN``, k's flow control), blinded again, truncated and appended to
  ``from-<k>.bin``.

Then, per party, the smaller of the two files becomes the one sorted table in memory and the
other streams through it (``SortedPoints``); the pairwise matches give the aligned order
(``align_matches``), and each party is sent its positions in it.

What a restart keeps is in ``vflcore.psi.progress``: ``prepare`` reads it, decides per party
whether to resume (the party must still hold its secrets) and returns each party's ``PsiPlan``.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import structlog

from vflcore.errors import JobAborted
from vflcore.psi import make_dst
from vflcore.psi.blinding import Progress
from vflcore.psi.chunks import AHEAD, WINDOW, Chunking, id_bytes, packed_points, point_list
from vflcore.psi.hash_to_curve import U_BYTES
from vflcore.psi.intersection import AlignedOrder, align_matches
from vflcore.psi.matching import MATCH_BYTES, SortedPoints, truncate
from vflcore.psi.pipeline import each_ahead, side_by_side
from vflcore.psi.progress import (
    ChunkLog,
    PsiSecrets,
    discard,
    load_exchange,
    load_secrets,
    progress_dir,
    save_exchange,
    save_secrets,
)
from vflcore.psi.ray_blinding import blinder_on
from vflcore.runtime.compute import LOCAL, ComputeEngine
from vflcore.runtime.logs import progress_callback
from vflcore.wire.names import PSI_CLIENT_BLINDED, PSI_CLIENT_TAKEN, PSI_SERVER_BLINDED, PSI_SERVER_DOUBLE_BLINDED
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import PsiPlan
from vflserver.federation.passive_parties import PassiveParties

log = structlog.get_logger(__name__)

_TAKEN = np.zeros(0, dtype=np.uint8)


class _Blinder(Protocol):
    def hash_and_blind_packed(self, ids: list[bytes], dst: bytes, *, progress: Progress | None = None) -> bytes: ...

    def blind_packed(self, points: list[bytes], *, progress: Progress | None = None) -> bytes: ...


class _Counter:
    """Chunks done in one stream: a ``psi_progress`` line at every tenth of the stream, a TTY bar, and
    the job's live figure (``PassiveParties.psi_progress``, which the operator's console shows)."""

    def __init__(
        self, stream: str, party: int, chunking: Chunking, first: int, shown: dict[str, tuple[int, int]]
    ) -> None:
        self.stream, self.party, self.chunking = stream, party, chunking
        self.done = first
        self.computed = 0
        self._step = max(1, chunking.count // 10)
        self._bar = progress_callback(f"PSI: {stream} (party {party})")
        self._shown = shown
        shown[stream] = (first, chunking.count)

    def add(self) -> None:
        self.done += 1
        self.computed += 1
        self._shown[self.stream] = (self.done, self.chunking.count)
        if self._bar is not None:
            self._bar(self.chunking.done_items(self.done), self.chunking.total)
        if self.done % self._step == 0 or self.done == self.chunking.count:
            log.info("psi_progress", stream=self.stream, peer=self.party, chunks=self.done, of=self.chunking.count)


class ActiveExchange:
    """One PSI run of the active party: ``prepare`` (what to resume), then ``run`` (the streams and the match)."""

    def __init__(
        self,
        ids: np.ndarray,
        passive: PassiveParties,
        *,
        cache_dir: Path,
        key: bytes,
        chunk_ids: int,
        workers: int | None = None,
        engine: ComputeEngine = LOCAL,
        id_order: np.ndarray | None = None,
    ) -> None:
        self.ids = ids
        self.id_order = id_order  # the IDs' sorted order, if the caller has it: the aligned order needs it
        self.passive = passive
        self.job_id = passive.job.job_id
        self.parties = list(passive.job.passive_parties)
        self.key = key
        self.folder = progress_dir(cache_dir, key)
        self.chunk_ids = chunk_ids
        self.workers = workers
        self.engine = engine  # where the curve arithmetic runs: this host, or the party's Ray cluster
        self.own = Chunking(len(ids), chunk_ids)
        self.theirs = {p: Chunking(passive.members.member(p).id_count, chunk_ids) for p in self.parties}
        self.plans: dict[int, PsiPlan] = {}
        self._secrets: PsiSecrets | None = None
        self._from: dict[int, ChunkLog] = {}
        self._to: dict[int, ChunkLog] = {}
        self._stop = threading.Event()

    # ---- what to resume ---------------------------------------------------------------------

    def prepare(self) -> dict[int, PsiPlan]:
        """Each party's plan; the secrets are on disk (synced) before any blinded value is sent.

        Kept progress is resumed only if it was made for this very exchange (same chunk size and
        ID counts; the folder's name already pins the job and every ID set) and, per party, only
        if the party kept its own secrets too. Otherwise that party, or all, start afresh.
        """
        counts = {1: self.own.total, **{p: c.total for p, c in self.theirs.items()}}
        secrets = load_secrets(self.folder) if load_exchange(self.folder) == (self.chunk_ids, counts) else None
        if secrets is None:
            discard(self.folder)
            secrets = PsiSecrets.generate()
            save_secrets(self.folder, secrets)
            save_exchange(self.folder, self.chunk_ids, counts)
        self._secrets = secrets
        resumed: dict[int, dict[str, int]] = {}
        for party in self.parties:
            can = self.key in self.passive.members.member(party).resumable_psi
            self._from[party] = ChunkLog(self.folder / f"from-{party}.bin", self.theirs[party], MATCH_BYTES)
            self._to[party] = ChunkLog(self.folder / f"to-{party}.bin", self.own, MATCH_BYTES)
            upload_from = self._from[party].open(fresh=not can)
            download_from = self._to[party].open(fresh=not can)
            self.plans[party] = PsiPlan(self.chunk_ids, self.own.total, can, upload_from, download_from)
            if upload_from or download_from:
                resumed[party] = {
                    "uploads": upload_from,
                    "of_uploads": self.theirs[party].count,
                    "downloads": download_from,
                    "of_downloads": self.own.count,
                }
        if resumed:
            log.info("psi_resumed", chunk_ids=self.chunk_ids, parties={str(p): r for p, r in resumed.items()})
        self._expect()
        return self.plans

    def _expect(self) -> None:
        """Announce every chunk each party will upload, so each is checked on arrival."""
        for party, plan in self.plans.items():
            theirs = self.theirs[party]
            for chunk in range(plan.upload_from, theirs.count):
                self.passive.expect(PSI_CLIENT_BLINDED, 0, chunk, (theirs.length(chunk), U_BYTES), "uint8", party=party)
            for chunk in range(plan.download_from, self.own.count):
                length = self.own.length(chunk)
                self.passive.expect(PSI_SERVER_DOUBLE_BLINDED, 0, chunk, (length, MATCH_BYTES), "uint8", party=party)

    # ---- the exchange -----------------------------------------------------------------------

    def run(self) -> AlignedOrder:
        """The streams, then the match; each party is sent its positions of the aligned IDs."""
        secrets = self._secrets
        assert secrets is not None, "prepare() first"
        largest = max([self.own.total, *(c.total for c in self.theirs.values())])
        counters: list[_Counter] = []
        try:
            with blinder_on(self.engine, largest, secrets.blinding, self.workers) as pool:
                streams: dict[str, Callable[[], None]] = {"own": functools.partial(self._own_stream, pool, counters)}
                for party in self.parties:
                    streams[f"from-{party}"] = functools.partial(self._peer_stream, pool, party, counters)
                side_by_side(streams, self._stop)
        finally:
            for chunk_log in [*self._from.values(), *self._to.values()]:
                chunk_log.close()
        log.info(
            "psi_exchanged",
            chunks_computed=sum(c.computed for c in counters),
            chunks_total=self.own.count + sum(self.own.count + c.count for c in self.theirs.values()),
            streams={c.stream: c.computed for c in counters},
        )
        matches = {party: self._match(party) for party in self.parties}
        return align_matches(self.ids, matches, self.id_order)

    def _own_stream(self, pool: _Blinder, counters: list[_Counter]) -> None:
        assert self._secrets is not None
        order = self._secrets.order(self.own.total)
        dst = make_dst(self.job_id)
        first = min(plan.download_from for plan in self.plans.values())
        counter = _Counter("own", 1, self.own, first, self.passive.psi_progress)
        counters.append(counter)
        shown = self.passive.psi_progress
        per_party = {p: _Counter(f"back-{p}", p, self.own, self.plans[p].download_from, shown) for p in self.parties}
        counters.extend(per_party.values())

        def blind_own(chunk: int) -> np.ndarray:
            rows = order.span(*self.own.bounds(chunk))
            return packed_points(pool.hash_and_blind_packed(id_bytes(self.ids, rows), dst))

        out: deque[tuple[int, list[int]]] = deque()
        chunks = range(first, self.own.count)
        for chunk, points in each_ahead(blind_own, chunks, AHEAD):
            counter.add()  # the console's figure for this stream too: it stayed at "0 of N" before
            needing = [p for p in self.parties if chunk >= self.plans[p].download_from]
            for party in needing:
                self.passive.publish(party, TensorKey(self.job_id, 0, chunk, PSI_SERVER_BLINDED), points)
            out.append((chunk, needing))
            while len(out) > WINDOW:
                self._store_returns(*out.popleft(), per_party)
        while out:
            self._store_returns(*out.popleft(), per_party)

    def _store_returns(self, chunk: int, parties: list[int], counters: dict[int, _Counter]) -> None:
        for party in parties:
            back = self._take(party, PSI_SERVER_DOUBLE_BLINDED, chunk)
            self._to[party].append(chunk, back)
            counters[party].add()

    def _peer_stream(self, pool: _Blinder, party: int, counters: list[_Counter]) -> None:
        theirs = self.theirs[party]
        first = self.plans[party].upload_from
        counter = _Counter(f"from-{party}", party, theirs, first, self.passive.psi_progress)
        counters.append(counter)

        def blind_theirs(chunk: int) -> np.ndarray:
            points = self._take(party, PSI_CLIENT_BLINDED, chunk)
            self.passive.publish(party, TensorKey(self.job_id, 0, chunk, PSI_CLIENT_TAKEN), _TAKEN)
            return truncate(packed_points(pool.blind_packed(point_list(points))))

        chunks = range(first, theirs.count)
        for chunk, twice in each_ahead(blind_theirs, chunks, AHEAD):
            self._from[party].append(chunk, twice)
            counter.add()

    def _take(self, party: int, name: str, chunk: int) -> np.ndarray:
        if self._stop.is_set():
            raise JobAborted("another part of the PSI exchange failed")
        return self.passive.uploads.gather_from(
            party, name, 0, chunk, timeout_s=self.passive.psi_timeout_s, watch=self.parties, stop=self._stop
        )

    # ---- matching -----------------------------------------------------------------------------

    def _match(self, party: int) -> tuple[np.ndarray, np.ndarray]:
        """(active rows, party's upload positions) of the IDs both hold: the smaller side sorted, the other streamed."""
        assert self._secrets is not None
        mine, theirs = self._to[party], self._from[party]
        if theirs.chunking.total <= mine.chunking.total:
            table, streamed, table_is_theirs = theirs, mine, True
        else:
            table, streamed, table_is_theirs = mine, theirs, False
        sorted_points = SortedPoints.build(table.chunking.total, table.chunks())
        found_streamed: list[np.ndarray] = []
        found_table: list[np.ndarray] = []
        for chunk, values in enumerate(streamed.chunks()):
            i, j = sorted_points.lookup(values)
            found_streamed.append(i + streamed.chunking.bounds(chunk)[0])
            found_table.append(j)
        del sorted_points
        streamed_pos = np.concatenate([np.zeros(0, np.int64), *found_streamed])
        table_pos = np.concatenate([np.zeros(0, np.int64), *found_table])
        own_positions, their_positions = (streamed_pos, table_pos) if table_is_theirs else (table_pos, streamed_pos)
        rows = self._secrets.order(self.own.total).rows(own_positions)
        return rows, their_positions

    def finish(self) -> None:
        """The aligned IDs are saved: the secrets and kept chunks go."""
        discard(self.folder)
