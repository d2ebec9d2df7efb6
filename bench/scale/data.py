"""make bench-data: the project's table reader next to pyarrow's own, on 1M and 10M x 30 tables, CSV and Parquet.

Each table is a shuffled string ID column (``c0`` ... ``c9999999``) and 30 float columns of
standard normal float32 values: the CSV holds them as text (shortest float32 form, 3.4 GB at
10M rows), the Parquet file as float64 columns (what most exports hold). They are written once
into the cache folder (``--cache``, by default ``bench/.cache/data``, ignored by git) and reused.

For every file, in the same run and each in its own fresh subprocess (so every peak RSS is its
own), this bench times:

- the project's reader, ``read_party_csv(path)``: StringDType IDs, a float32 (n, 30) matrix;
- ``pyarrow``: pyarrow reading the same file into numpy: ``pyarrow.csv.read_csv`` /
  ``pyarrow.parquet.read_table``, the IDs as pyarrow's numpy form (an object array of str), the
  features copied into a float32 (n, 30) matrix column by column. The target's yardstick;
- ``parse``: the same without the IDs' conversion (they stay an Arrow array): pyarrow's parse
  alone, the floor any reader of this file into a float32 matrix pays. For context only;
- once per run, the interpreter's baseline: a subprocess that imports what the reader imports
  and reads nothing; and the reader's fixed cost: the project's reader on a 100-row table of
  the same layout (Arrow's thread pools and buffers, whatever the size).

Each reader runs ``--repeats`` times, alternating, and the best time of each is compared (the
machine is shared: the best run is the one least disturbed). Both readers' arrays are checked
equal (a SHA-256 of the features' bytes and of the IDs).

Targets (issue 28): read time <= 1.5x pyarrow's; peak RSS <= 2x the final arrays' bytes (features
plus IDs) plus the baseline's peak RSS. The last line is ``BENCH data_read_vs_pyarrow <ratio> x
target <= 1.5 MET|MISSED``, on the 10M-row Parquet file (``--quick``: 100k rows, the largest
Parquet file of the run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common.machine import cpu_counters
from bench.common.paths import CACHE
from bench.common.versions import versions_line

FEATURES = 30
FULL_ROWS = (1_000_000, 10_000_000)
QUICK_ROWS = (100_000,)
TARGET_RATIO = 1.5
MEMORY_FACTOR = 2.0
DEFAULT_CACHE = CACHE / "data"
_WRITE_ROWS = 1_000_000  # rows generated and written at a time (120 MB of float32)
_FORMAT = "v1"  # in the file names: a change to what is written makes new files


@dataclass(frozen=True)
class Read:
    """One reader's run in one subprocess."""

    wall_s: float
    cpu_s: float
    peak_rss: int  # bytes
    arrays: int  # bytes of the final arrays (features plus IDs)
    rows: int
    checksum: str
    others: float | None  # CPUs busy with other work meanwhile


def main() -> int:
    args = _parse_args()
    if args.child:
        return _child(args.child, Path(args.path) if args.path else None)
    sizes = tuple(args.rows) if args.rows else QUICK_ROWS if args.quick else FULL_ROWS
    args.cache.mkdir(parents=True, exist_ok=True)
    print(
        f"bench-data: {', '.join(f'{n:,}' for n in sizes)} rows x {FEATURES} floats + a string ID; cache {args.cache}"
    )
    print(versions_line("pyarrow", "numpy"), flush=True)
    files = []
    for rows in sizes:
        files += _tables(args.cache, rows)
    baseline = _run("baseline", None)
    print(
        "interpreter baseline (imports numpy, pyarrow, vflcore.data.tables; reads nothing): "
        f"peak RSS {_mib(baseline.peak_rss)}"
    )
    fixed = {path.suffix: _run("project", path).peak_rss for path in _tables(args.cache, 100, quiet=True)}
    print(
        "the reader's fixed cost, on a 100-row table: peak RSS "
        + ", ".join(f"{suffix[1:]} {_mib(peak)}" for suffix, peak in fixed.items())
    )
    print()
    print(
        f"{'file':<26} {'reader':<8} {'best s':>7} {'runs s':<22} {'cpu s':>6} "
        f"{'peak RSS':>10} {'arrays':>9} {'others':>7}"
    )
    verdicts: dict[Path, tuple[float, bool, bool]] = {}
    for path in files:
        runs: dict[str, list[Read]] = {"project": [], "pyarrow": [], "parse": []}
        for _ in range(args.repeats):
            for reader in runs:
                runs[reader].append(_run(reader, path))
        verdicts[path] = _report(path, runs, baseline)
        sys.stdout.flush()
    print()
    for path, (ratio, time_met, rss_met) in verdicts.items():
        print(
            f"{path.name:<26} time {ratio:.2f}x pyarrow ({'MET' if time_met else 'MISSED'} <= {TARGET_RATIO}), "
            f"peak RSS {'MET' if rss_met else 'MISSED'} (<= {MEMORY_FACTOR:g}x arrays + baseline)"
        )
    final = [path for path in files if path.suffix == ".parquet"][-1]
    ratio, met, _ = verdicts[final]
    print(f"BENCH data_read_vs_pyarrow {ratio:.2f} x target <= {TARGET_RATIO} {'MET' if met else 'MISSED'}")
    return 0


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.data", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k rows only: a smoke run of a minute")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of the generated tables")
    parser.add_argument("--rows", type=int, nargs="+", help="table sizes to run instead (e.g. --rows 1000000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each reader per file (best one counts)")
    parser.add_argument("--child", choices=("baseline", "project", "pyarrow", "parse"), help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    return parser.parse_args()


def _report(path: Path, runs: dict[str, list[Read]], baseline: Read) -> tuple[float, bool, bool]:
    """Print the readers' rows; (time ratio, time target met, memory target met)."""
    best = {reader: min(reads, key=lambda r: r.wall_s) for reader, reads in runs.items()}
    name = f"{path.name} ({_mib(path.stat().st_size)})"
    for reader, reads in runs.items():
        mine = best[reader]
        times = ", ".join(f"{r.wall_s:.2f}" for r in reads)
        peak = max(r.peak_rss for r in reads)
        others = "-" if mine.others is None else f"{mine.others:.2f}"
        print(
            f"{name:<26} {reader:<8} {mine.wall_s:7.2f} {times:<22} {mine.cpu_s:6.2f} "
            f"{_mib(peak):>10} {_mib(mine.arrays):>9} {others:>7}"
        )
        name = ""
    project, pyarrow = best["project"], best["pyarrow"]
    if len({r.checksum for r in best.values()}) != 1 or project.rows != pyarrow.rows:
        print(
            f"{'':<26} ARRAYS DIFFER: project {project.rows} rows {project.checksum[:16]}, "
            f"pyarrow {pyarrow.rows} rows {pyarrow.checksum[:16]}"
        )
    ratio = project.wall_s / pyarrow.wall_s
    allowed = MEMORY_FACTOR * project.arrays + baseline.peak_rss
    peak = max(r.peak_rss for r in runs["project"])
    print(
        f"{'':<26} time {ratio:.2f}x pyarrow (target <= {TARGET_RATIO}); project peak RSS {_mib(peak)} "
        f"against {MEMORY_FACTOR:g} x {_mib(project.arrays)} + {_mib(baseline.peak_rss)} = {_mib(allowed)} "
        f"({peak / allowed:.2f} of it); pyarrow's peak {_mib(max(r.peak_rss for r in runs['pyarrow']))}; "
        f"time {project.wall_s / best['parse'].wall_s:.2f}x the parse alone"
    )
    same = project.checksum == pyarrow.checksum
    return ratio, ratio <= TARGET_RATIO and same, peak <= allowed


def _run(reader: str, path: Path | None) -> Read:
    """One reader in a fresh interpreter; its report comes back as a JSON line."""
    command = [sys.executable, "-m", "bench.scale.data", "--child", reader] + (
        [] if path is None else ["--path", str(path)]
    )
    before, started = cpu_counters(), time.perf_counter()
    done = subprocess.run(
        command, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}
    )
    after, wall = cpu_counters(), time.perf_counter() - started
    report = json.loads(done.stdout.strip().splitlines()[-1])
    usage = report.pop("process_cpu_s")
    others = None if before is None or after is None else max(0.0, (after[0] - before[0]) - usage) / wall
    return Read(others=others, **report)


def _child(reader: str, path: Path | None) -> int:
    """Runs in the subprocess: import, read, measure, then checksum (after the peak is taken)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from vflcore.data.id_arrays import aligned_digest
    from vflcore.data.tables import read_party_csv

    started, cpu = time.perf_counter(), time.process_time()
    ids: np.ndarray | pa.ChunkedArray | None = None
    features: np.ndarray | None = None
    if reader == "project" and path is not None:
        table = read_party_csv(path)
        ids, features = table.ids, table.features
    elif reader in ("pyarrow", "parse") and path is not None:
        if path.suffix == ".parquet":
            arrow = pq.read_table(path)
        else:
            arrow = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(column_types={"id": pa.string()}))
        ids = arrow.column("id") if reader == "parse" else arrow.column("id").to_numpy()
        features = np.empty((arrow.num_rows, FEATURES), dtype=np.float32)
        for j in range(FEATURES):
            features[:, j] = arrow.column(j + 1).to_numpy()
        del arrow
    wall, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    peak = _peak_rss()
    checksum, rows, arrays = "", 0, 0
    if ids is not None and features is not None:
        import hashlib

        rows = len(ids)
        arrays = features.nbytes + (ids.nbytes if isinstance(ids, np.ndarray) and ids.dtype.kind == "T" else 0)
        listed = ids.to_numpy() if isinstance(ids, pa.ChunkedArray) else ids  # after the timing: a checksum only
        checksum = hashlib.sha256(features.tobytes() + aligned_digest(listed).tobytes()).hexdigest()
    process_cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    report = {"wall_s": wall, "cpu_s": cpu_s, "peak_rss": peak, "arrays": arrays, "rows": rows, "checksum": checksum}
    print(json.dumps({**report, "process_cpu_s": process_cpu}))
    return 0


def _peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM, which starts afresh at exec.

    ``ru_maxrss`` would not do: Linux carries it across fork and exec, so a child would report
    the bench's own peak (the table writer's) whenever that is larger.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # not Linux: the best there is


def _tables(cache: Path, rows: int, *, quiet: bool = False) -> list[Path]:
    """The CSV and Parquet files of ``rows`` rows, written now unless the cache has them."""
    stem = cache / f"t{rows}x{FEATURES}-{_FORMAT}"
    csv_path, parquet_path = stem.with_suffix(".csv"), stem.with_suffix(".parquet")
    if not (csv_path.is_file() and parquet_path.is_file()):
        started = time.perf_counter()
        _write_tables(csv_path, parquet_path, rows)
        print(
            f"  wrote {csv_path.name} and {parquet_path.name} in {time.perf_counter() - started:.1f} s (once; reused)"
        )
    return [csv_path, parquet_path]


def _write_tables(csv_path: Path, parquet_path: Path, rows: int, seed: int = 0) -> None:
    """Both files a million rows at a time, under temporary names renamed at the end (no half file)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    order = rng.permutation(rows)
    names = [f"f{j}" for j in range(FEATURES)]
    text_schema = pa.schema([("id", pa.string()), *((name, pa.float32()) for name in names)])
    column_schema = pa.schema([("id", pa.string()), *((name, pa.float64()) for name in names)])
    csv_tmp, parquet_tmp = csv_path.with_suffix(".csv.tmp"), parquet_path.with_suffix(".parquet.tmp")
    with (
        pcsv.CSVWriter(csv_tmp, text_schema, write_options=pcsv.WriteOptions(quoting_style="needed")) as text,
        pq.ParquetWriter(parquet_tmp, column_schema) as columns,
    ):
        for start in range(0, rows, _WRITE_ROWS):
            count = min(_WRITE_ROWS, rows - start)
            ids = pc.binary_join_element_wise("c", pa.array(order[start : start + count]).cast(pa.string()), "")
            values = rng.standard_normal((count, FEATURES), dtype=np.float32)
            text.write_table(pa.table([ids, *(pa.array(values[:, j]) for j in range(FEATURES))], schema=text_schema))
            columns.write_table(
                pa.table(
                    [ids, *(pa.array(values[:, j].astype(np.float64)) for j in range(FEATURES))], schema=column_schema
                )
            )
    os.replace(csv_tmp, csv_path)
    os.replace(parquet_tmp, parquet_path)


def _mib(value: float) -> str:
    return f"{value / (1 << 20):,.0f} MiB"


if __name__ == "__main__":
    raise SystemExit(main())
