"""Entry point of ``python -m bench.psi`` (``make bench-psi``): the options, then the bench's steps in order.

What each step measures and why is described in the package docstring (``bench/psi/__init__.py``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import bench.psi
from bench.common.versions import versions_line
from bench.psi.comparison import compare_openmined
from bench.psi.inputs import prepare_inputs
from bench.psi.report import (
    DEFAULT_IDS,
    print_bench_line,
    print_header,
    print_speed,
    print_summary,
    print_workers,
    report_run,
)
from bench.psi.run import PsiRun, run_psi
from bench.psi.secretflow import PROTOCOLS as SECRETFLOW_PROTOCOLS
from bench.psi.secretflow_comparison import SPU_VERSION, OurFigures, compare_secretflow, default_protocols, side_by_side
from bench.psi.speed import x25519_speed

DEFAULT_WORKERS = 2  # measured faster than 1 on this 2-core box with both parties running (docstring)


def parse_args() -> argparse.Namespace:
    description = (bench.psi.__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.psi", description=description)
    parser.add_argument("--ids", type=int, default=DEFAULT_IDS, help="IDs per party (half shared)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="[psi] workers for both parties")
    parser.add_argument("--compare-workers", action="store_true", help="run with 1 and 2 workers; report both")
    parser.add_argument(
        "--x25519", choices=("auto", "multibuffer", "openssl"), default="auto", help="[psi] x25519 for both parties"
    )
    parser.add_argument("--openmined", choices=("auto", "full", "skip"), default="auto")
    parser.add_argument(
        "--openmined-budget", type=float, default=420.0, help="seconds openmined.psi may take (auto mode)"
    )
    parser.add_argument(
        "--secretflow", choices=("auto", "skip"), default="auto", help="SecretFlow spu PSI on the same CSVs"
    )
    parser.add_argument(
        "--secretflow-protocols",
        nargs="+",
        choices=tuple(SECRETFLOW_PROTOCOLS),
        help="default: ecdh-25519, ecdh-25519-elligator2 (up to 1,000,000 IDs), ecdh-fourq, rr22",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    args = parser.parse_args()
    n = args.ids
    if n % 2 or n < 2 or n > 6_000_000:
        parser.error("--ids must be even, between 2 and 6,000,000")
    return args


def main() -> int:
    """0 whether the target is met or missed; 1 if the PSI failed or found a wrong intersection."""
    args = parse_args()
    n = args.ids
    print_header(n)
    print(versions_line("cryptography", "gmpy2", "ipp-crypto", "numpy", "grpcio", others={"spu": SPU_VERSION}))
    speed = x25519_speed()
    print_speed(speed, n)
    sys.stdout.flush()

    root = Path(tempfile.mkdtemp(prefix="vfl-bench-psi-"))
    try:
        certs, data = prepare_inputs(root, n)
        runs: dict[int, PsiRun] = {}
        for workers in (1, 2) if args.compare_workers else (args.workers,):
            try:
                run = run_psi(root, workers, n, certs, data, x25519=args.x25519)
            except RuntimeError as exc:
                print(f"PSI FAILED: {exc}", file=sys.stderr)
                print(f"PSI FAILED ({workers} workers): {str(exc).splitlines()[0]}")
                return 1
            runs[workers] = run
            report_run(run, n)
            sys.stdout.flush()
        best = min(runs.values(), key=lambda r: r.aligned_s)
        if args.compare_workers:
            print_workers(runs, best)
        theirs, theirs_note = compare_openmined(args.openmined, args.openmined_budget, root, data, n)
        print_summary(n, best, theirs, theirs_note, speed)
        sys.stdout.flush()
        protocols = args.secretflow_protocols or default_protocols(n)
        secretflow = compare_secretflow(args.secretflow, protocols, root, data, n)
        print("\n".join(side_by_side(n, OurFigures.of(best), secretflow)))
    finally:
        if args.keep:
            print(f"  kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_bench_line(n, best, secretflow.reference_s, secretflow.why_no_reference)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
