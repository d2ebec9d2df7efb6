"""Where ``vfl-score`` runs its units: a loop in this process, or Ray Data on the party's cluster.

Both engines call the one function ``score_unit`` on the same units (``units.plan_units``), so a
row is scored by the same onnxruntime options, in the same run of rows, either way; the scores
are identical, not merely close (``tests/integration/inference/test_ray_engine.py`` compares them bit for bit).

On Ray the units become a Ray Dataset of one row each, and ``map_batches`` runs ``score_unit``
on one unit per Ray task, each task with one CPU, as many at once as the cluster has CPUs; Ray
Data's own streaming executor paces them. A task whose worker dies is retried, as Ray Data retries
every task that fails for a system reason (a lost worker or node, not an error the unit raised):
it reads its row group again and writes the same file again. The model's bytes travel to the
workers with the tasks; the rows are read by the workers themselves from ``--input``, and their
scores written to ``--output``, so on a cluster of several machines both must be storage that
every node mounts at the same path (``docs/explanation/scale.md``). Nothing but a row count per unit comes
back to this process.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from vflcore.errors import DataError, VflError
from vflcore.runtime.compute import ComputeEngine, connect
from vflserver.scoring.model import ScoringModel
from vflserver.scoring.units import ScoreUnit, plan_units, read_unit, write_scores

__all__ = ["ScoringReport", "score_table_folder", "score_unit"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ScoringReport:
    """What a scoring run did: how many units (row groups) and rows, where, on which engine, how long."""

    units: int
    rows: int
    output: Path
    engine: str
    seconds: float


def score_unit(model: ScoringModel, unit: ScoreUnit, id_column: str, session: Any = None) -> int:
    """Read one row group, score it, write its output file; the number of rows. The same on both engines."""
    ids, features = read_unit(unit, id_column, model.feature_names)
    scores = model.score(session if session is not None else model.session(), features)
    write_scores(unit, id_column, ids, scores)
    return len(features)


def score_table_folder(
    model: ScoringModel,
    input_path: Path,
    output: Path,
    *,
    id_column: str = "id",
    engine: ComputeEngine,
) -> ScoringReport:
    """Score every row under ``input_path`` into ``output`` on ``engine``; DataError names a bad file or column."""
    if id_column in model.columns():
        raise DataError(
            f"the ID column {id_column!r} has the name of a score column ({', '.join(model.columns())}); "
            "rename it in the input"
        )
    started = time.perf_counter()
    units = plan_units(input_path, output, id_column, model.feature_names)
    output.mkdir(parents=True, exist_ok=True)
    log.info("scoring_started", units=len(units), rows=sum(u.rows for u in units), engine=engine.describe())
    on_ray = engine.on_ray
    rows = _on_ray(model, units, id_column, engine) if on_ray else _locally(model, units, id_column)
    seconds = time.perf_counter() - started
    log.info("scoring_done", units=len(units), rows=rows, seconds=round(seconds, 2))
    return ScoringReport(len(units), rows, output, engine.describe(), seconds)


def _locally(model: ScoringModel, units: Sequence[ScoreUnit], id_column: str) -> int:
    """One unit after another in this process, on one core (one session, one intra-op thread)."""
    session = model.session()
    rows = 0
    for n, unit in enumerate(units, 1):
        rows += score_unit(model, unit, id_column, session)
        log.debug("unit_scored", unit=n, of=len(units), rows=unit.rows)
    return rows


def _score_batch(batch: dict[str, np.ndarray], *, model: ScoringModel, id_column: str) -> dict[str, np.ndarray]:
    """Ray Data's ``map_batches`` function: each row of ``batch`` is a unit; scores it and counts its rows.

    A unit's DataError (or OSError) comes back as its message in the ``error`` column instead of
    being raised: Ray Data hands the caller a ``UserCodeException`` that keeps only the text of
    the exception it wraps, and the caller should meet the DataError the local loop raises.
    """
    counts, errors = [], []
    for source, group, first, rows, target in zip(
        batch["source"], batch["row_group"], batch["first_row"], batch["rows"], batch["output"], strict=True
    ):
        unit = ScoreUnit(Path(source), int(group), int(first), int(rows), Path(target))
        try:
            counts.append(score_unit(model, unit, id_column))
            errors.append("")
        except (DataError, OSError) as exc:
            counts.append(0)
            errors.append(str(exc))
    return {"output": batch["output"], "scored": np.asarray(counts, np.int64), "error": np.asarray(errors, str)}


def _on_ray(model: ScoringModel, units: Sequence[ScoreUnit], id_column: str, engine: ComputeEngine) -> int:
    connect(engine)
    import ray.data

    items = [_item(unit) for unit in units]
    dataset = ray.data.from_items(items, override_num_blocks=len(items))
    done = dataset.map_batches(
        functools.partial(_score_batch, model=model, id_column=id_column),
        batch_size=1,
        batch_format="numpy",
        num_cpus=1,
    ).take_all()
    failed = sorted((str(row["output"]), str(row["error"])) for row in done if row["error"])
    if failed:
        raise DataError(failed[0][1])  # the first unit in output order, as the local loop would meet it
    if len(done) != len(units):
        raise VflError(f"Ray Data scored {len(done)} of {len(units)} units; see the cluster's logs")
    return sum(int(row["scored"]) for row in done)


def _item(unit: ScoreUnit) -> dict[str, str | int]:
    """A unit as a row of the Ray Dataset (plain strings and numbers; ``_score_batch`` rebuilds it)."""
    return {
        "source": str(unit.source),
        "row_group": unit.row_group,
        "first_row": unit.first_row,
        "rows": unit.rows,
        "output": str(unit.output),
    }
