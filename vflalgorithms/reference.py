"""What every in-process reference shares: the plaintext alignment, the constructor's opening and ``from_tables``.

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
from typing import Any, Self

import numpy as np
import torch

from vflalgorithms.options import algorithm_options
from vflcore.data.tables import PartyTable, select_rows
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.losses import label_tensor, task_loss

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
    """An in-process reference: the opening every constructor shares, and ``from_tables``.

    A subclass names the ``algorithms`` it trains and builds its models in ``_build``, which this
    constructor calls last; ``from_tables`` builds it from each party's table.
    """

    #: The ``[job] algorithm`` values this class trains.
    algorithms: tuple[str, ...] = ()
    #: The aligned IDs, row by row, when built by ``from_tables``.
    ids: np.ndarray | None = None

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
    ) -> None:
        """Check the job against ``features`` (party id to its aligned float32 rows; party 1, the active party,
        may have 0 columns) and keep what every reference reads: the job, its schedule, options, labels and loss.

        ``top_hidden`` and ``top_dropout`` are the active party's top model's, kept for the subclass to build.
        """
        if job.algorithm not in self.algorithms:
            raise ValueError(
                f"{type(self).__name__} trains {' or '.join(self.algorithms)}, not {job.algorithm!r}; "
                "use algorithm_spec(job.algorithm).reference_class()"
            )
        if job.num_rows < 1:
            raise ValueError("job.num_rows must be set to the number of aligned rows")
        expected = {ACTIVE_PARTY, *job.passive_parties}
        if set(features) != expected:
            raise ValueError(f"features are for parties {sorted(features)}, the job has {sorted(expected)}")
        if any(len(x) != job.num_rows for x in features.values()):
            raise ValueError(f"every party's features must have job.num_rows = {job.num_rows} rows")
        self.job = job
        self.schedule = job.schedule()
        #: The job's algorithm options, completed with their defaults.
        self.options: dict[str, Any] = algorithm_options(job.algorithm, job.algorithm_options)
        self.features = dict(features)
        self.labels, self.num_outputs = label_tensor(job.task, labels)
        self.loss_fn = task_loss(job.task)
        self.passive = sorted(job.passive_parties)
        self.top_hidden, self.top_dropout = tuple(top_hidden), top_dropout
        #: The training loss of every step, in order (what the server records).
        self.step_losses: list[float] = []
        self._build()

    def _build(self) -> None:
        """Build the models, optimizers and state this reference trains, after the shared opening.

        Each subclass extends it (``super()._build()`` first), so the constructor's signature is
        written once, here, and a relative adds only what it trains beyond its parent.
        """

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
