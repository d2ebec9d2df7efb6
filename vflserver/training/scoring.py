"""Scoring aligned rows with a job's trained model: what the inference endpoint serves by sample ID.

A federated model asks each online passive party for its representation of the rows (an ``Infer``
task) and stands in a fixed one for a party that is offline, when the degraded modes allow it
(TVFL-0 / TVFL-A). A model that is the active party's alone needs no one.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from vflalgorithms.base import ServerAlgorithm
from vflcore.job import JobSpec
from vflcore.wire.names import infer_embedding_name
from vflcore.work_items import Infer
from vflserver.federation.passive_parties import PassiveParties


class Scorer:
    """Predictions for aligned rows, by row or by sample ID, one federated request at a time."""

    def __init__(
        self, job: JobSpec, parties: PassiveParties, algorithm: ServerAlgorithm, ids: Iterable[object]
    ) -> None:
        self.job, self.parties, self.algorithm = job, parties, algorithm
        self._row_of_id = {str(i): n for n, i in enumerate(ids)}
        self._lock = threading.Lock()

    def predict_rows(self, rows: np.ndarray, *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference on aligned rows; federated unless the algorithm's model is the active party's alone.

        Every passive party must be online, except those given a stand-in representation in
        ``substitutes`` (one row, broadcast over ``rows``): the degraded TVFL-0 / TVFL-A modes.
        """
        if not self.algorithm.needs_parties_to_predict:
            return self.algorithm.predict(rows, {}).numpy()
        with self._lock:
            return self.algorithm.predict(rows, self._representations(rows, substitutes or {})).numpy()

    def predict_ids(self, ids: Sequence[str], *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference by sample ID (see ``predict_rows``); KeyError if any ID is not among the aligned rows.

        The error says how many, never which: on the inference endpoint, naming them would tell a
        caller which of its IDs are in the PSI intersection (``docs/security.md``).
        """
        missing = sum(str(i) not in self._row_of_id for i in ids)
        if missing:
            raise KeyError(f"{missing} of the {len(ids)} IDs cannot be served")
        rows = np.asarray([self._row_of_id[str(i)] for i in ids], dtype=np.int64)
        return self.predict_rows(rows, substitutes=substitutes)

    def representation_means(self, rows: np.ndarray) -> dict[int, np.ndarray]:
        """Each passive party's mean representation over ``rows`` (the training rows: the TVFL-A stand-in)."""
        with self._lock:
            found = self._representations(rows, {})
        return {party: array.mean(axis=0, dtype=np.float64).astype(np.float32) for party, array in found.items()}

    def _representations(self, rows: np.ndarray, substitutes: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Each passive party's representation of ``rows``: asked of the online ones, stood in for the rest."""
        request_id = uuid.uuid4().hex[:12]
        name = infer_embedding_name(request_id)
        fed, width = self.parties, self.algorithm.upload_width
        asked: list[int] = []
        for party in self.job.passive_parties:
            if party in substitutes and fed.absence(party) is not None:
                continue  # stood in for below (the caller warns: it knows the mode)
            fed.check_online(party)  # raises once the party has been gone longer than the grace period
            asked.append(party)
        for party in asked:
            fed.expect(name, 0, 0, (len(rows), width), party=party)
        fed.dispatch(lambda tid: Infer(tid, request_id, rows), parties=asked)
        try:
            found = {party: fed.gather_from(party, name, 0, 0) for party in asked}
        finally:
            fed.forget(name, 0, 0)
        for party in self.job.passive_parties:
            if party not in found:
                found[party] = np.broadcast_to(np.asarray(substitutes[party], dtype=np.float32), (len(rows), width))
        return found
