"""What every in-process reference shares: the plaintext alignment and the ``from_tables`` constructor.

Each algorithm's ``reference.py`` trains its models in one process, with no federation in the
way: the yardstick its federated run is compared with, step by step.

The same models (shapes and seeds), optimizers, batch schedule and loss as the federated
algorithm, but every party's bottom model lives here and the embeddings never leave memory. Tests
compare its per-step losses with a federated run, and the overhead benchmark compares its epoch
time. It copies the federated numerics on purpose: each passive embedding is cut out of the
graph (detach, then a leaf that requires grad) exactly where the wire cuts it, so that the two
runs agree to float32 rounding rather than merely in distribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Self

import numpy as np
import torch

from vflcore.data.tables import PartyTable, select_rows
from vflcore.job import ACTIVE_PARTY, JobSpec

__all__ = ["FromTables", "aligned_tables"]


def aligned_tables(
    job: JobSpec, tables: Mapping[int, PartyTable]
) -> tuple[JobSpec, dict[int, torch.Tensor], torch.Tensor, np.ndarray]:
    """(job with num_rows, features per party, labels, IDs) of the rows every party holds.

    Rows are aligned in plaintext, to what PSI agrees on: the IDs every party holds, ordered
    by their UTF-8 bytes (for ``str`` that is the same as Python's string order).
    """
    common = sorted(set.intersection(*(set(table.ids.tolist()) for table in tables.values())))
    if not common:
        raise ValueError("the parties' tables share no ID")
    ids = np.asarray(common, dtype=object)
    aligned = {party: select_rows(table, ids) for party, table in tables.items()}
    labels = aligned[ACTIVE_PARTY].labels
    if labels is None:
        raise ValueError("party 1's table needs a label column")
    features = {
        party: torch.from_numpy(np.ascontiguousarray(table.features, dtype=np.float32))
        for party, table in aligned.items()
    }
    return replace(job, num_rows=len(ids)), features, torch.from_numpy(np.asarray(labels, dtype=np.float64)), ids


class FromTables:
    """``from_tables`` for an in-process reference whose constructor takes (job, features, labels, top_hidden)."""

    #: The aligned IDs, row by row, when built by ``from_tables``.
    ids: np.ndarray | None = None

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int],
        top_dropout: float = 0.0,
    ) -> None:
        raise NotImplementedError  # each reference defines its own

    @classmethod
    def from_tables(
        cls,
        job: JobSpec,
        tables: Mapping[int, PartyTable],
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
    ) -> Self:
        """Build from each party's table as read from its file; party 1's table holds the labels."""
        job, features, labels, ids = aligned_tables(job, tables)
        model = cls(job, features, labels, top_hidden=top_hidden, top_dropout=top_dropout)
        model.ids = ids
        return model
