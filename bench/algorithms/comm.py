"""Bytes to reach 95 % test accuracy on digits: VIMADMM against VIMSGD and SplitNN (VIM, 004).

Each algorithm runs as the product runs it: ``vfl-server`` and four ``vfl-client`` daemons as
separate processes over mTLS on 127.0.0.1. The shape follows the VIM authors' digits setting
that the issue quotes: four passive clients with two image rows each (the active party holds
the labels only), batch 256, 60-dim embeddings, τ = 20 and ρ = 1 for VIMADMM. Every algorithm
uses the same bottom models (64 hidden units), Adam at torch's default learning rate 0.001 and
the same seed. Bytes are the training traffic both daemons count (``vflcore.wire.traffic``: every
tensor message, both directions, all parties); evaluation, inference and PSI are excluded.

FedBCD (Q = 5), async (no delay) and VIMADMM-J (τ = 20, ρ = 1) run too, so that the plot shows
every algorithm; the targets concern VIMADMM against SplitNN only. A round here is an epoch
(one pass over the training rows, 6 batches of 256), evaluated after each. Prints a table,
writes ``bench/out/comm.png`` (accuracy against rounds and against MB), and ends with two BENCH
lines: VIMADMM's rounds to 95 %, then its bytes as a fraction of
SplitNN's (target: at most 1/15, and 95 % within 5 rounds).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

from bench.algorithms.curves import Curve, plot
from bench.common.jobs import run_jobs
from bench.common.paths import OUT
from bench.common.versions import versions_line
from vfltesting.datasets import write_vertical_split
from vfltesting.jobs import DIGITS_JOB
from vfltesting.pki import issue_pki

TARGET_ACCURACY = 0.95
TARGET_FRACTION = 1 / 15
TARGET_ROUNDS = 5
PASSIVE = (2, 3, 4, 5)
TOP_HIDDEN = (64,)
BASE = replace(
    DIGITS_JOB, job_id="", epochs=10, batch_size=256, embedding_dim=60, learning_rate=0.001, passive_parties=PASSIVE
)
JOBS = [
    replace(BASE, job_id="comm-splitnn", algorithm="splitnn", epochs=25),
    replace(BASE, job_id="comm-vimsgd", algorithm="vimsgd", epochs=25),
    # The other algorithms, for the plot of every algorithm (not part of the targets):
    replace(BASE, job_id="comm-fedbcd", algorithm="fedbcd", epochs=12),
    replace(BASE, job_id="comm-async", algorithm="async", epochs=25),
    replace(
        BASE,
        job_id="comm-vimadmm-j",
        algorithm="vimadmm_j",
        epochs=8,
        algorithm_options={"local_steps": 20, "rho": 1.0},
    ),
    # Last: the algorithm the targets are about.
    replace(
        BASE, job_id="comm-vimadmm", algorithm="vimadmm", epochs=8, algorithm_options={"local_steps": 20, "rho": 1.0}
    ),
]


def write_data(out: Path) -> int:
    """Digits over four passive parties of two image rows each; the active party has labels only."""
    digits = load_digits()
    names = [f"r{row}c{col}" for row in range(8) for col in range(8)]
    columns: list[list[int]] = [[]] + [
        [row * 8 + col for row in rows for col in range(8)] for rows in ((0, 1), (2, 3), (4, 5), (6, 7))
    ]
    write_vertical_split(
        out, features=digits.data / 16.0, labels=digits.target, feature_names=names, party_columns=columns, seed=0
    )
    return len(digits.target)


def _fmt(value: float | int | None, spec: str) -> str:
    return "never" if value is None else format(value, spec)


def main() -> int:
    print("== bytes to reach 95 % test accuracy on digits: VIMADMM vs SplitNN (and every other algorithm) ==")
    print("   4 passive clients x 2 image rows, labels-only active party, batch 256, embedding 60, Adam 0.001;")
    print("   VIMADMM tau = 20, rho = 1; each job = vfl-server + 4 vfl-client processes over mTLS", flush=True)
    print(versions_line("torch", "numpy", "scikit-learn"), flush=True)
    curves: list[Curve] = []
    with tempfile.TemporaryDirectory(prefix="vfl-bench-comm-") as tmp:
        root = Path(tmp)
        issue_pki(root / "certs", PASSIVE)
        rows = write_data(root / "data")
        batches = int(np.ceil(round(rows * (1 - BASE.test_fraction)) / BASE.batch_size))
        try:
            runs = list(run_jobs(root, JOBS, certs=root / "certs", data=root / "data", top_hidden=TOP_HIDDEN))
        except RuntimeError as exc:
            print(f"bench failed: {exc}")
            return 1
        for job, summary in runs:
            curve = Curve.from_summary(job.algorithm, summary, batches)
            curves.append(curve)
            print(
                f"   {job.algorithm:<8} accuracy per round: {' '.join(f'{a:.3f}' for a in curve.accuracy)}",
                flush=True,
            )
    print()
    print(f"{'algorithm':<10} {'MB/round':>9} {'rounds to 95%':>14} {'MB to 95%':>10} {'vs SplitNN':>11}")
    splitnn_mb = curves[0].mb_to(TARGET_ACCURACY)
    for curve in curves:
        per_round = curve.cumulative_mb[-1] / len(curve.cumulative_mb)
        mb = curve.mb_to(TARGET_ACCURACY)
        fraction = None if mb is None or splitnn_mb is None else mb / splitnn_mb
        print(
            f"{curve.label:<10} {per_round:9.3f} {_fmt(curve.epochs_to(TARGET_ACCURACY), 'd'):>14} "
            f"{_fmt(mb, '.2f'):>10} {_fmt(fraction, '.4f'):>11}"
        )
    png = plot(
        curves,
        TARGET_ACCURACY,
        OUT / "comm.png",
        title="digits, 4 clients, every algorithm: test accuracy by round and by MB",
    )
    print(f"plot: {png}")
    admm = curves[-1]
    rounds = admm.epochs_to(TARGET_ACCURACY)
    admm_mb = admm.mb_to(TARGET_ACCURACY)
    fraction = None if admm_mb is None or splitnn_mb is None else admm_mb / splitnn_mb
    rounds_met = rounds is not None and rounds <= TARGET_ROUNDS
    print(
        f"BENCH vimadmm_rounds_to_95 {_fmt(rounds, 'd')} rounds target <= {TARGET_ROUNDS} "
        f"{'MET' if rounds_met else 'MISSED'}"
    )
    met = fraction is not None and fraction <= TARGET_FRACTION
    print(
        f"BENCH vimadmm_bytes_vs_splitnn {_fmt(fraction, '.4f')} x target <= {TARGET_FRACTION:.4f} "
        f"{'MET' if met else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
