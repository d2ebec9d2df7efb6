"""SplitNN on 10M aligned rows over mTLS between the real daemons: seconds per epoch and each party's peak RSS.

``vfl-server`` (party 1: 30 features and a binary label) and two ``vfl-client`` daemons (30
features each) run as OS processes on 127.0.0.1 (``vfltesting.service.ServiceRun``), each reading
its own Parquet table of ``--rows`` rows with a string ID (``u0000000042``), the same ID set on
every party, so every row aligns. The label is learnable from all 90 features together: a fixed
linear score over every party's columns, plus noise.

The tables are written once into ``--cache`` (``bench/.cache/train_10m/<rows>``, ignored by git)
and reused. PSI at 10M is ``make bench-psi-10m``'s subject (tens of minutes here), so the job
reuses a saved alignment instead: before the job starts, the bench files one for every party with
the product's own cache functions (``vflcore.psi.cache``: ``alignment_key`` over the job id and
every party's ``ids_digest``, then ``save_alignment``) in each party's run folder, where a job
looks (``vflserver.federation.alignment``, ``vflclient._alignment``). The output says whether each
party reused it. The IDs are written in their sorted order, which is the order PSI agrees on, so
a party's table is its own aligned table (``vflcore.data.tables.select_rows``); a table in
another order costs one more copy of its features.

What is printed:

- **baseline** per daemon: its RSS once it is up, has connected and has sat idle for 2 s (torch
  imported and warmed), measured first on daemons of their own that read tables of 1,000 rows (a
  ``vfl-client`` reads its table when it starts, so the big run's daemons never idle without it);
- **s/epoch** (the server's epoch report: training plus evaluation of the held-out 20 %) and
  **steps/s** (training batches over that time), from the job's ``summary.json``;
- **peak RSS** per daemon: the kernel's high-water mark (``VmHWM``), read every 0.2 s until the
  job ends, next to its **target**: 2 x the party's aligned feature array (rows x 30 x 4 B) plus
  its baseline.

The last line is ``BENCH train_10m_peak_rss_vs_target <worst ratio> x target <= 1.0 MET|MISSED``
(with another ``--rows``, the name says the size: ``train_200000rows_peak_rss_vs_target``), where
a party's ratio is peak / (2 x aligned feature bytes + baseline). Exit code 0 whether the target
is met or missed; 1 if the job did not finish.

Run: ``make bench-train-10m`` (a quiet machine with about 8 GB free: three tables of 1.2 GB of
features), or a smoke run: ``.venv/bin/python -m bench.scale.train_10m --rows 200000``.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common.daemons import DAEMONS, wait_for_daemons
from bench.common.machine import measured
from bench.common.paths import CACHE
from bench.common.versions import versions_line
from vflclient import JobClient, VflError
from vflcore.data.checkpoints import party_dir
from vflcore.data.id_arrays import string_column
from vflcore.data.tables import ids_digest
from vflcore.psi.cache import alignment_key, save_alignment
from vfltesting.pki import Pki, issue_pki
from vfltesting.service import ServiceRun, job_document, log_events

DEFAULT_ROWS = 10_000_000
DEFAULT_CACHE = CACHE / "train_10m"
FEATURES = 30
PARTIES = (1, 2, 3)
BLOCK_ROWS = 1_000_000
TEST_FRACTION = 0.2
TARGET_RATIO = 1.0
SAMPLE_S = 0.2
#: Seconds the daemons may sit idle after connecting before the baseline is read (allocator settles).
SETTLE_S = 2.0
#: Rows of the tables the baseline's daemons read: next to nothing.
BASELINE_ROWS = 1_000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.train_10m", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="aligned rows (every party's table)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs of the job")
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="folder of the generated tables")
    parser.add_argument("--timeout", type=float, default=None, help="seconds the job may take (default: scaled)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, run folders)")
    return parser.parse_args()


# ---- the tables ---------------------------------------------------------------------------------


def write_tables(cache: Path, rows: int) -> Path:
    """Party 1-3's Parquet tables of ``rows`` rows, written once into ``cache/<rows>`` and reused."""
    folder = cache / str(rows)
    if (folder / "done").exists():
        print(f"tables: reused from {folder}")
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    names = [f"f{j}" for j in range(FEATURES)]
    weights = np.random.default_rng(0).standard_normal((len(PARTIES), FEATURES)) / math.sqrt(len(PARTIES) * FEATURES)
    writers: dict[int, pq.ParquetWriter] = {}
    try:
        for start in range(0, rows, BLOCK_ROWS):
            n = min(BLOCK_ROWS, rows - start)
            rng = np.random.default_rng([1, start])
            features = rng.standard_normal((len(PARTIES), n, FEATURES), dtype=np.float32)
            score = np.einsum("pnf,pf->n", features, weights) + 0.3 * rng.standard_normal(n)
            ids = _ids(start, n)
            for index, party in enumerate(PARTIES):
                columns = {"id": ids, **{name: features[index][:, j] for j, name in enumerate(names)}}
                if party == 1:
                    columns["label"] = (score > 0).astype(np.int64)
                table = pa.table(columns)
                if party not in writers:
                    writers[party] = pq.ParquetWriter(folder / f"party{party}.parquet", table.schema)
                writers[party].write_table(table)
    finally:
        for writer in writers.values():
            writer.close()
    (folder / "done").write_text("")
    print(
        f"tables: wrote {len(PARTIES)} x {rows:,} rows x {FEATURES} features in {time.perf_counter() - started:.0f} s"
    )
    return folder


def _ids(start: int, n: int) -> pa.Array:
    """``u`` and a 10-digit number: zero-padded, so the file order is the IDs' sorted order."""
    digits = pc.utf8_lpad(pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string()), 10, "0")
    return pc.binary_join_element_wise("u", digits, "")


def save_alignments(tables: Path, runs: Path, job_id: str) -> int:
    """File the alignment every party would reach by PSI (every ID, sorted) where the job looks for it."""
    ids = string_column(pq.read_table(tables / "party1.parquet", columns=["id"]).column("id"))
    if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        raise RuntimeError(f"{tables}: IDs are not written in sorted order; delete the folder to write it again")
    digest = ids_digest(ids)  # every party holds this ID set
    key = alignment_key(job_id, dict.fromkeys(PARTIES, digest))
    for party in PARTIES:
        pairwise = {p: len(ids) for p in PARTIES if p != 1} if party == 1 else None
        save_alignment(party_dir(runs, job_id, party) / "psi", key, ids, digest, pairwise)
    return len(ids)


# ---- memory -------------------------------------------------------------------------------------


def _status_kib(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines) if k in ("VmRSS", "VmHWM")}


@dataclass
class Peaks:
    """Each daemon's highest VmHWM seen, sampled on a thread until ``stop``."""

    pids: dict[str, int]

    def __post_init__(self) -> None:
        self.kib = dict.fromkeys(self.pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                self.kib[name] = max(self.kib[name], _status_kib(pid).get("VmHWM", 0))
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---- the run ------------------------------------------------------------------------------------


def run_job(run: ServiceRun, jobs: JobClient, job_id: str, args: argparse.Namespace) -> str:
    """Submit the SplitNN job and follow it to its end; returns its final state."""
    document = job_document(
        job_id,
        "splitnn",
        epochs=args.epochs,
        dataset="train10m",
        batch_size=args.batch_size,
        test_fraction=TEST_FRACTION,
        join_timeout_s=600,
    )
    jobs.submit(document)
    deadline = time.monotonic() + (args.timeout or 600 + args.epochs * args.rows / 5_000)
    state, cancelled = "submitted", False
    for event in jobs.watch(job_id):
        state = event.state
        print(f"  {time.strftime('%H:%M:%S')} {event.kind:<5} {event.state:<9} {event.message[:100]}", flush=True)
        if time.monotonic() > deadline and not cancelled:
            jobs.cancel(job_id)  # seen at the next event: an epoch's end, or the job's
            cancelled = True
    return state


def idle_baseline(root: Path, pki: Pki, tables: Path) -> dict[str, int]:
    """Each daemon's RSS (KiB), idle after warm-up, on tables of ``BASELINE_ROWS`` rows: the interpreter's baseline.

    Measured on daemons of their own: a ``vfl-client`` reads its table when it starts, so the
    big run's daemons are never idle without their table.
    """
    root.mkdir()
    run = ServiceRun(root, pki, tables, datasets={"train10m": tables}, table_suffix=".parquet", serving=False)
    try:
        run.start_server()
        run.start_clients()
        wait_for_daemons(run)
        time.sleep(SETTLE_S)
        return {name: _status_kib(run.procs[name].pid).get("VmRSS", 0) for name in DAEMONS}
    finally:
        run.stop()


def main() -> int:
    args = parse_args()
    print(versions_line("torch", "numpy", "pyarrow", "grpcio"), flush=True)
    tables = write_tables(args.cache, args.rows)
    root = Path(tempfile.mkdtemp(prefix="bench-train-10m-"))
    try:
        pki = issue_pki(root / "pki", (2, 3))
        run = ServiceRun(
            root,
            pki,
            tables,
            datasets={"train10m": tables},
            table_suffix=".parquet",
            serving=False,
            server_settings={"step_timeout_s": 600, "join_timeout_s": 600},
        )
        job_id = f"train-{args.rows}-{secrets.token_hex(3)}"
        aligned = save_alignments(tables, root / "runs", job_id)
        print(f"alignment: saved for every party beforehand ({aligned:,} rows); the job reuses it, PSI does not run")
        try:
            baseline = idle_baseline(root / "baseline", pki, write_tables(args.cache, BASELINE_ROWS))
            run.start_server()
            run.start_clients()
            wait_for_daemons(run)
            pids = {name: run.procs[name].pid for name in DAEMONS}
            with JobClient(run.address, tls=pki.operator_files("alice")) as jobs, Peaks(pids) as peaks:
                state, window = measured(lambda: run_job(run, jobs, job_id, args), own_children=True)
        except (VflError, RuntimeError, OSError, AssertionError) as exc:
            print(f"bench failed: {type(exc).__name__}: {exc}\n{run.tail(20)}", file=sys.stderr)
            return 1
        finally:
            run.stop()
        if state != "finished":
            print(f"the job ended {state}\n{run.tail(20)}", file=sys.stderr)
            return 1
        return report(run, job_id, args, aligned, baseline, peaks.kib, window.steal)
    finally:
        if args.keep:
            print(f"logs and run folders kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def report(
    run: ServiceRun,
    job_id: str,
    args: argparse.Namespace,
    aligned: int,
    baseline: dict[str, int],
    peak: dict[str, int],
    steal: float | None,
) -> int:
    """Print the epoch figures, each party's peak against its target, and the BENCH line."""
    summary = json.loads((party_dir(run.root / "runs", job_id, 1) / "summary.json").read_text())
    reused = {"server": bool(summary["psi"]["reused"])}
    reused |= {name: bool(log_events(run.logs[name], "alignment_reused")) for name in DAEMONS if name != "server"}
    train_rows = aligned - round(aligned * TEST_FRACTION)
    steps = math.ceil(train_rows / args.batch_size)
    answers = ", ".join(f"{name} {'yes' if yes else 'NO'}" for name, yes in reused.items())
    print(f"\nalignment reused (no PSI): {answers}")
    print(f"{aligned:,} aligned rows, {train_rows:,} training rows, batch {args.batch_size}: {steps} steps an epoch")
    for epoch in summary["epochs"]:
        seconds = float(epoch["seconds"])
        print(
            f"epoch {epoch['epoch']}: {seconds:.1f} s (training + evaluating {aligned - train_rows:,} rows), "
            f"{steps / seconds:.1f} steps/s, train loss {epoch['train_loss']:.4f}, "
            f"test accuracy {epoch['metrics'].get('accuracy', float('nan')):.4f}"
        )
    if steal is not None:
        print(f"CPUs the hypervisor stole meanwhile: {steal:.2f} (the machine is shared: timings are noisy)")
    feature_bytes = aligned * FEATURES * 4
    print(f"\n{'daemon':<9} {'baseline':>10} {'features':>10} {'target':>10} {'peak RSS':>10} {'ratio':>6}")
    worst = 0.0
    for name in DAEMONS:
        target_kib = 2 * feature_bytes / 1024 + baseline[name]
        ratio = peak[name] / target_kib
        worst = max(worst, ratio)
        print(
            f"{name:<9} {_mib(baseline[name])} {_mib(feature_bytes / 1024)} {_mib(target_kib)} "
            f"{_mib(peak[name])} {ratio:6.3f}"
        )
    print("target per party: peak RSS <= 2 x its aligned feature array + its idle baseline")
    label = "train_10m" if args.rows == DEFAULT_ROWS else f"train_{args.rows}rows"
    verdict = "MET" if worst <= TARGET_RATIO else "MISSED"
    print(f"BENCH {label}_peak_rss_vs_target {worst:.3f} x target <= {TARGET_RATIO} {verdict}")
    return 0


def _mib(kib: float) -> str:
    return f"{kib / 1024:7.0f} MiB"


if __name__ == "__main__":
    sys.exit(main())
