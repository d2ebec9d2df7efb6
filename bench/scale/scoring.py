"""``vfl-score`` at size: the local loop against Ray Data on this machine, side by side, same files.

A synthetic customer base (``--rows`` rows × 30 float32 features and a string ID, Parquet row
groups of ``--row-group`` rows) is scored with a standalone classifier exported the way an APFed
job exports the active party's model (MLP 30 → 64 → 32 → 2, softmax and argmax in the graph).
The same input is scored twice in one run:

- ``local``: ``vfl-score``'s loop, one process, one onnxruntime thread;
- ``ray``: Ray Data on a private Ray instance on this machine (``ray_address = "local"``), one
  task per row group, as many at once as the machine has cores. Starting Ray is timed apart and
  not counted: a party points the product at a cluster that already runs.

Both outputs are compared file by file (``pyarrow.Table.equals``): the engines must write
identical scores. Printed: rows per second of each engine and the speedup, Ray's time over the
local loop's. The target is a speedup of at least 0.75 per core (1.5 on two cores); the last line
is ``BENCH score_ray_speedup <x> x target >= <t> MET|MISSED``, and a miss still exits 0 (1 only
if the outputs differ). On a shared machine the figure moves with the neighbours' load: compare
runs taken side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bench.common.versions import versions_line
from vflcore.ml.models import build_seeded, mlp
from vflcore.ml.onnx_export import MODEL_FILE, OnnxPart, export_onnx
from vflcore.runtime.compute import LOCAL, ComputeEngine, connect
from vflcore.runtime.logs import configure_logging
from vflserver.inference.artifact import LABEL, PROBABILITIES, ArtifactInfo
from vflserver.inference.onnx_model import info_metadata
from vflserver.scoring.engines import score_table_folder
from vflserver.scoring.model import ScoringModel

FEATURES = 30
#: The speedup Ray must reach per core of this machine.
TARGET_PER_CORE = 0.75


def write_model(path: Path) -> ScoringModel:
    """A seeded classifier over FEATURES columns, exported as an APFed job exports the active party's model."""
    network = build_seeded(lambda: mlp(FEATURES, (64, 32), 2), 0).eval().requires_grad_(False)

    def forward(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output = network(features)
        return torch.softmax(output, dim=1), output.argmax(dim=1)

    info = ArtifactInfo("bench-score", "bench-score", "apfed_c", "classification", _names(), 2)
    probe = torch.from_numpy(np.random.default_rng(1).normal(size=(16, FEATURES)).astype(np.float32))
    export_onnx(OnnxPart(forward, {"features": probe}, (PROBABILITIES, LABEL), info_metadata(info)), path)
    return ScoringModel.load(path)


def _names() -> tuple[str, ...]:
    return tuple(f"x{i:02d}" for i in range(FEATURES))


def write_customers(folder: Path, rows: int, row_group: int, files: int) -> None:
    """``files`` Parquet files holding ``rows`` rows in all, in row groups of ``row_group`` rows."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    per_file = -(-rows // files)
    for k in range(files):
        n = min(per_file, rows - k * per_file)
        if n <= 0:
            break
        columns: dict[str, object] = {"id": pa.array(np.char.add(f"cust-{k}-", np.arange(n).astype(str)))}
        values = rng.normal(size=(n, FEATURES)).astype(np.float32)
        columns.update({name: values[:, j] for j, name in enumerate(_names())})
        pq.write_table(pa.table(columns), folder / f"part-{k:03d}.parquet", row_group_size=row_group)


def identical(a: Path, b: Path) -> bool:
    names = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    if names != sorted(p.relative_to(b) for p in b.rglob("*.parquet")):
        return False
    return all(pq.read_table(a / n).equals(pq.read_table(b / n)) for n in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.scale.scoring", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--row-group", type=int, default=131_072)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="100,000 rows: a check that the bench runs")
    args = parser.parse_args(argv)
    configure_logging(json=False, level="warning", stream=sys.stderr)  # the table below is the output
    print(versions_line("pyarrow", "numpy", "ray", "onnxruntime"), flush=True)
    rows = 100_000 if args.quick else args.rows
    row_group = 16_384 if args.quick else args.row_group
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench-score-") as tmp:
        root = Path(tmp)
        model = write_model(root / MODEL_FILE)
        write_customers(root / "in", rows, row_group, args.files)
        print(
            f"{rows:,} rows × {FEATURES} features in {args.files} file(s), row groups of {row_group:,}; {cores} cores"
        )

        local = score_table_folder(model, root / "in", root / "out-local", engine=LOCAL)
        started = time.perf_counter()
        engine = ComputeEngine("ray", "local")
        connect(engine)
        print(f"Ray start (not counted): {time.perf_counter() - started:.1f} s")
        warm = score_table_folder(model, root / "in", root / "out-warm", engine=engine)  # workers start, imports
        on_ray = score_table_folder(model, root / "in", root / "out-ray", engine=engine)
        same = identical(root / "out-local", root / "out-ray") and identical(root / "out-local", root / "out-warm")

    print(f"{'engine':<16}{'seconds':>10}{'rows/s':>14}")
    for name, report in (("local", local), ("ray (first run)", warm), ("ray", on_ray)):
        print(f"{name:<16}{report.seconds:>10.2f}{report.rows / report.seconds:>14,.0f}")
    print(f"outputs identical, file by file: {same}")
    speedup = local.seconds / on_ray.seconds
    target = TARGET_PER_CORE * cores
    print(f"BENCH score_ray_speedup {speedup:.2f} x target >= {target:.2f} {'MET' if speedup >= target else 'MISSED'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
