"""Predicting aligned rows with a job's trained model: what the inference endpoint serves by sample ID.

A federated model asks each online passive party for its representation of the rows (an ``Infer``
task) and stands in a fixed one for a party that is offline, when the degraded modes allow it
(TVFL-0 / TVFL-A). A model that is the active party's alone needs no one.

IDs are found by binary search in a sorted copy of the aligned IDs (numpy strings; the search
is ``id_arrays.sorted_positions``, never ``np.searchsorted``, which misreads IDs of 16 bytes or
more on numpy < 2.5), not in a dict: at 10M aligned rows a dict of ``str`` costs about 1 GB
and a Python object per row, the sorted copy and its order 240 MB and none. A request for more
than ``BLOCK_ROWS`` rows is served a block at a time, so that no party builds its representation of every row at once.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, TypeVar

import numpy as np
from numpy.dtypes import StringDType

from vflalgorithms.halves import ServerAlgorithm
from vflcore.data import id_arrays
from vflcore.job.spec import JobSpec
from vflcore.memory import return_freed_memory
from vflcore.psi.intersection import is_strictly_increasing
from vflcore.wire.names import infer_embedding_name
from vflcore.work_items import Infer
from vflserver.federation.passive_parties import PassiveParties

#: Rows per federated request: a passive party's representation of one block, and the active
#: party's activations on it, stay a few MB whatever the number of rows asked for.
BLOCK_ROWS: Final = 1 << 16

T = TypeVar("T")


def in_blocks(rows: np.ndarray, predict: Callable[[np.ndarray], T]) -> list[T]:
    """``predict`` on ``BLOCK_ROWS`` of ``rows`` at a time, in order; the caller joins the parts.

    With more than one block, the memory each block's work freed goes back to the system after
    it (``return_freed_memory``), rather than staying scattered over the heaps.
    """
    if len(rows) <= BLOCK_ROWS:
        return [predict(rows)]
    parts = []
    for start in range(0, len(rows), BLOCK_ROWS):
        parts.append(predict(rows[start : start + BLOCK_ROWS]))
        return_freed_memory()
    return parts


class AlignedPredictor:
    """Predictions for aligned rows, by row or by sample ID, one federated request at a time."""

    def __init__(
        self, job: JobSpec, parties: PassiveParties, algorithm: ServerAlgorithm, ids: Iterable[object]
    ) -> None:
        self.job, self.parties, self.algorithm = job, parties, algorithm
        aligned = _strings(ids)
        self._order: np.ndarray | None
        if is_strictly_increasing(aligned):
            # PSI's agreed order is the IDs' sorted order: the aligned IDs are their own sorted
            # copy, and a row is its position in them (no copy and no order array: 240 MB at 10M).
            self._order, self._sorted_ids = None, aligned
        else:
            self._order = np.argsort(aligned, kind="stable")  # aligned IDs are distinct: any sort would do
            self._sorted_ids = aligned[self._order]
        self._lock = threading.Lock()

    def predict_rows(self, rows: np.ndarray, *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference on aligned rows; federated unless the algorithm's model is the active party's alone.

        Every passive party must be online, except those given a stand-in representation in
        ``substitutes`` (one row, broadcast over ``rows``): the degraded TVFL-0 / TVFL-A modes.
        """
        if len(rows) > BLOCK_ROWS:
            return np.concatenate(in_blocks(rows, lambda block: self.predict_rows(block, substitutes=substitutes)))
        if not self.algorithm.needs_parties_to_predict:
            return self.algorithm.predict(rows, {}).numpy()
        with self._lock:
            return self.algorithm.predict(rows, self._representations(rows, substitutes or {})).numpy()

    def predict_ids(self, ids: Sequence[str], *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference by sample ID (see ``predict_rows``); KeyError if any ID is not among the aligned rows.

        The error says how many, never which: on the inference endpoint, naming them would tell a
        caller which of its IDs are in the PSI intersection (``docs/explanation/security.md``).
        """
        rows, missing = self.rows_of(ids)
        if missing:
            raise KeyError(f"{missing} of the {len(ids)} IDs cannot be served")
        return self.predict_rows(rows, substitutes=substitutes)

    def rows_of(self, ids: Sequence[str] | np.ndarray) -> tuple[np.ndarray, int]:
        """(aligned row of each ID, how many IDs are not aligned); the rows mean something only when none is missing."""
        wanted = _strings(ids)
        sorted_ids = self._sorted_ids
        at = id_arrays.sorted_positions(sorted_ids, wanted)
        inside = at < len(sorted_ids)
        found = np.zeros(len(wanted), dtype=bool)
        found[inside] = sorted_ids[at[inside]] == wanted[inside]
        missing = len(wanted) - int(np.count_nonzero(found))
        rows = at[found] if missing else at
        if self._order is not None:
            rows = self._order[rows]
        return rows.astype(np.int64, copy=False), missing

    def representation_means(self, rows: np.ndarray) -> dict[int, np.ndarray]:
        """Each passive party's mean representation over ``rows`` (the training rows: the TVFL-A stand-in)."""
        sums: dict[int, np.ndarray] = {}
        for start in range(0, max(len(rows), 1), BLOCK_ROWS):  # a block at a time, as predict_rows asks
            with self._lock:
                found = self._representations(rows[start : start + BLOCK_ROWS], {})
            for party, array in found.items():
                total = array.sum(axis=0, dtype=np.float64)
                sums[party] = total if party not in sums else sums[party] + total
            del found
            if len(rows) > BLOCK_ROWS:
                return_freed_memory()
        return {party: (total / max(len(rows), 1)).astype(np.float32) for party, total in sums.items()}

    def _representations(self, rows: np.ndarray, substitutes: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Each passive party's representation of ``rows``: asked of the online ones, stood in for the rest."""
        request_id = uuid.uuid4().hex[:12]
        name = infer_embedding_name(request_id)
        fed, width = self.parties, self.algorithm.upload_width
        asked: list[int] = []
        for party in self.job.passive_parties:
            if party in substitutes and fed.liveness.absence(party) is not None:
                continue  # stood in for below (the caller warns: it knows the mode)
            fed.liveness.check_online(party)  # raises once the party has been gone longer than the grace period
            asked.append(party)
        for party in asked:
            fed.expect(name, 0, 0, (len(rows), width), party=party)
        fed.dispatch(lambda tid: Infer(tid, request_id, rows), parties=asked)
        try:
            found = {party: fed.uploads.gather_from(party, name, 0, 0) for party in asked}
        finally:
            fed.forget(name, 0, 0)
        for party in self.job.passive_parties:
            if party not in found:
                found[party] = np.broadcast_to(np.asarray(substitutes[party], dtype=np.float32), (len(rows), width))
        return found


def _strings(ids: Iterable[object]) -> np.ndarray:
    """IDs as numpy strings (``StringDType``): any value becomes its ``str``, as the lookup always compared them."""
    array = ids if isinstance(ids, np.ndarray) else np.asarray(list(ids), dtype=object)
    if array.dtype.kind == "T":
        return array
    return array.astype(object).astype(StringDType()) if len(array) else np.zeros(0, dtype=StringDType())
