"""Whether the active party's table, as it is when the job starts, can train the job; its output width.

The plan was checked at submission against the table as it was then (``vflserver.plan.admission``);
a file may have changed since, so the job checks again before it builds anything.
"""

from __future__ import annotations

from vflalgorithms.halves import ServerAlgorithm
from vflcore.data.tables import PartyTable
from vflcore.errors import ConfigError
from vflcore.job.distill import DistillSpec
from vflcore.job.spec import JobSpec
from vflcore.ml.losses import output_width
from vflprivacy.label_defences import check_classes
from vflserver.plan.admission import require_own_features


def table_outputs(
    job: JobSpec, table: PartyTable, algorithm: type[ServerAlgorithm], distill: DistillSpec | None
) -> int:
    """The model's output width from ``table``'s labels; ConfigError if the table cannot train ``job``.

    The plan was checked at submission against the table as it was then; this is the table as it
    is now.
    """
    if table.labels is None:
        raise ConfigError(f"{table.source}: the active party's data needs a label column")
    if algorithm.needs_own_features and not table.features.shape[1]:
        raise ConfigError(
            f"{table.source}: {job.algorithm} needs feature columns on the active party (it predicts from "
            "them alone), but this file has only IDs and labels"
        )
    if distill is not None:
        require_own_features(table, f"job {job.job_id}")
    outputs = output_width(job.task, table.labels, table.source)
    if job.task == "classification":
        check_classes(job.privacy, outputs, str(table.source))
    return outputs
