"""The in-process yardstick of the WAN benchmark (issue 17): per algorithm, accuracy and time per epoch.

``make bench-wan`` (not built yet) is to divide the wall time to a target accuracy over an
emulated WAN by the in-process reference's time to the same target. This module measures the
second half, on ``make bench-overhead``'s workload (60k rows, 40/60/60 features, batch 1,024,
embedding 60, one torch thread, 5 % held out): each algorithm's in-process reference trains
epoch by epoch and is evaluated after each one, and the cumulative seconds are printed next to
the accuracy. Async has no in-process reference (its order of arrivals is the network's).

    PYTHONPATH=. .venv/bin/python -m bench.operations.wan_reference [--epochs 6]

It prints figures and no BENCH line: it is half a benchmark, kept so that the WAN bench and
anyone checking its target use the same yardstick.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.operations.overhead import FEATURES_PER_PARTY, JOB, ROWS, TOP_HIDDEN
from vflalgorithms.registry import algorithm_spec
from vflcore.data.tables import read_party_csv
from vflcore.ml.metrics import task_metrics
from vflcore.runtime.daemon import prepare_compute
from vfltesting.datasets import write_synthetic_split

#: The algorithms of the WAN benchmark that have an in-process reference, with their options.
ALGORITHMS = {"splitnn": {}, "fedbcd": {"local_steps": 5}, "vimsgd": {}, "vimadmm": {}}


def curve(algorithm: str, options: dict[str, int], data: Path, epochs: int) -> list[tuple[float, float]]:
    """(held-out accuracy, cumulative seconds of training and evaluation) after each epoch."""
    tables = {1: read_party_csv(data / "party1.csv", label_column="label")}
    tables.update({p: read_party_csv(data / f"party{p}.csv") for p in JOB.passive_parties})
    job = replace(JOB, job_id=f"reference-{algorithm}", algorithm=algorithm, algorithm_options=options)
    model = algorithm_spec(algorithm).reference_class().from_tables(job, tables, top_hidden=TOP_HIDDEN)
    rows = model.schedule.test_rows
    truth = model.labels[rows].numpy()
    points, started = [], time.perf_counter()
    for epoch in range(epochs):
        model.train_epoch(epoch)
        accuracy = task_metrics(job.task, truth, model.predict(rows).numpy())["accuracy"]
        points.append((accuracy, time.perf_counter() - started))
    return points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    prepare_compute(1)
    print(f"== in-process references: {ROWS} rows, features {FEATURES_PER_PARTY}, batch {JOB.batch_size} ==")
    with tempfile.TemporaryDirectory(prefix="vfl-bench-") as tmp:
        data = Path(tmp) / "data"
        write_synthetic_split(data, rows=ROWS, features_per_party=FEATURES_PER_PARTY, seed=0)
        for algorithm, options in ALGORITHMS.items():
            points = curve(algorithm, options, data, args.epochs)
            line = "  ".join(f"{accuracy:.4f}@{seconds:.1f}s" for accuracy, seconds in points)
            print(f"{algorithm:<8} accuracy@cumulative seconds per epoch: {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
