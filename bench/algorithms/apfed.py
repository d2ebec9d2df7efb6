"""APFed's Table 2 on digits: can the active party, inferring alone, beat training alone (seed 001 §5)?

Settings 2-1, 2-2, 3-1, 3-2, 3-3 cut sklearn's 8x8 digits into horizontal strips (2 strips: pixel
rows 0-3 / 4-7; 3 strips: 0-2 / 3-5 / 6-7); in m-i the active party holds strip i and the labels,
passive parties 2 and 3 hold the other strips. Every method's accuracy is the active party's,
alone, on the held-out 20 % (360 digits):

- APFed-R, APFed-C: ``ReferenceAPFed`` with λ = 1 for every passive party (temperature 1 for C).
- SingleVL: the active party trained alone (``ReferenceAPFed`` with no passive party, which is
  λ = 0 exactly).
- TVFL-0 / -A / -R: SplitNN trained with every party (``ReferenceSplitNN``), then inferred with
  each passive embedding replaced by zeros, by the mean of that party's training-row embeddings,
  or by N(0, 1) noise. "TVFL (all)" keeps the passive parties, for reference only.

One architecture for every method, none of it tuned on these results. The issue's own figure
(+0.80) came from the APFed authors' code run on digits with MLP encoders, SGD momentum 0.9,
lr 0.05, batch 256, λ = 1 and 300 epochs, so everything else follows the paper first and that
code where the paper is silent:

- MLP encoders (bottom models, ENC_p): one hidden layer of 256 into a 64-wide embedding;
  APFed-R's decoder is the mirror image (64 → 256 → strip).
- g_T = fc(64, 256), ReLU, fc(256, 10): the paper's Table 3 shape, with dropout 0.5 after the
  hidden layer as in the authors' task network. SplitNN's top is the same over the three
  concatenated embeddings.
- Weight decay 1e-4 on every optimizer: Table 1's L2 regularisers r_A, r_T, r_p at Table 3's rate.
- APFed-C's temperature 1, the authors' default (the paper gives none).
- Not taken from that code: its projection heads (the issue puts h^A itself on the wire) and
  its two-sided loss (the issue cites Eq. 14, whose anchors are h^A_i only).

The first measurement (2026-11-22) ran without weight decay or dropout, with a linear g_T and
temperature 0.5, because the product had no weight decay then: +0.74, MISSED. The
table uses seeds 0-4 (each changes the initialisation and the
train/test split, shared by every method of that seed, so methods are compared pairwise); the λ
sweep on 2-1 (Fig. 3-4) uses seeds 0-2, and its λ = 1 and λ = 0 points are the table's runs.

Runs go to a pool of two worker processes with one torch thread each; every run is printed as it
finishes. Writes ``bench/out/apfed.md``, ``apfed.png`` and ``apfed_lambda.png``, and ends with one
BENCH line: the mean over settings of max(APFed-R, APFed-C) − SingleVL, in accuracy points
(target ≥ 0.8; the paper's MNIST rows give 0.77, its averages 0.57 for APFed-R, 0.64 for APFed-C).
"""

from __future__ import annotations

import time

from bench.algorithms.apfed_report import (
    APFED,
    METHODS,
    REFERENCE,
    apfed_gain,
    markdown_table,
    pattern_lines,
    plot_sweep,
    plot_table,
    sweep_table,
)
from bench.algorithms.apfed_runs import SETTINGS, STRIPS, Result, Run, execute
from bench.common.paths import OUT
from bench.common.pool import WORKERS, init_worker, run_in_pool
from bench.common.report import publish
from bench.common.versions import versions_line

TARGET_PTS = 0.8
TABLE_SEEDS = (0, 1, 2, 3, 4)
SWEEP_SETTING = "2-1"
SWEEP_SEEDS = (0, 1, 2)
LAMBDAS = (0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
_KIND = {"APFed-R": "apfed_r", "APFed-C": "apfed_c"}


def _run_of(setting: str, method: str, seed: int, weight: float = 1.0) -> Run:
    """The run whose result holds ``method``'s accuracy; λ = 0 and SingleVL are the same run."""
    if method == "SingleVL" or weight == 0:
        return Run(setting, "single", seed, 0.0)
    if method in _KIND:
        return Run(setting, _KIND[method], seed, weight)
    return Run(setting, "tvfl", seed, 0.0)  # every TVFL column comes from one SplitNN run


def plan() -> list[Run]:
    """Every distinct run of the table and the sweep, the slowest first so that the two workers finish together."""
    runs = {_run_of(s, m, seed) for s in SETTINGS for m in METHODS for seed in TABLE_SEEDS}
    runs |= {_run_of(SWEEP_SETTING, m, seed, w) for m in APFED for seed in SWEEP_SEEDS for w in LAMBDAS}
    cost = {"apfed_c": 2.5, "apfed_r": 1.2, "tvfl": 1.0, "single": 0.5}
    return sorted(runs, key=lambda r: (-cost[r.kind] * int(r.setting[0]), r.setting, r.kind, r.seed, r.weight))


def _describe(result: Result) -> str:
    r = result.run
    scores = ", ".join(f"{label} {100 * acc:.2f}" for label, acc in result.accuracy.items())
    return f"{r.setting} {r.kind:<7} seed {r.seed} λ={r.weight:g}: {scores} ({result.seconds:.1f} s)"


def run_all(runs: list[Run]) -> dict[Run, Result]:
    """Train every run in a pool of ``WORKERS`` processes, printing each as it finishes."""
    return {result.run: result for result in run_in_pool(runs, execute, init_worker, _describe, WORKERS)}


def _accuracy(results: dict[Run, Result], run: Run, method: str) -> float:
    return 100 * results[run].accuracy[method]


def main() -> int:
    print("== APFed Table 2 on digits: the active party infers alone (APFed-R/-C, SingleVL, TVFL-0/-A/-R) ==")
    print(
        f"   strips {STRIPS}; MLP 256 → 64, g_T 64 → 256 (dropout 0.5) → 10; SGD 0.9, lr 0.05, weight decay 1e-4,"
        " batch 256, 300 epochs, λ = 1, temperature 1"
    )
    print(
        f"   table seeds {TABLE_SEEDS}; λ sweep on {SWEEP_SETTING}, seeds {SWEEP_SEEDS}; {WORKERS} workers", flush=True
    )
    print(versions_line("torch", "numpy", "scikit-learn"), flush=True)
    started = time.perf_counter()
    results = run_all(plan())
    table = {
        s: {m: [_accuracy(results, _run_of(s, m, seed), m) for seed in TABLE_SEEDS] for m in (*METHODS, REFERENCE)}
        for s in SETTINGS
    }
    sweep = {
        m: {
            w: [_accuracy(results, _run_of(SWEEP_SETTING, m, seed, w), m if w else "SingleVL") for seed in SWEEP_SEEDS]
            for w in LAMBDAS
        }
        for m in APFED
    }
    minutes = (time.perf_counter() - started) / 60
    gain = apfed_gain(table)
    met = gain >= TARGET_PTS
    bench = f"BENCH apfed_minus_singlevl {gain:.2f} pts target >= {TARGET_PTS} {'MET' if met else 'MISSED'}"
    lines = [
        f"# APFed Table 2 on digits (accuracy %, mean ± std over seeds {TABLE_SEEDS})",
        "",
        markdown_table(table),
        "",
        f"## λ sweep, setting {SWEEP_SETTING} (seeds {SWEEP_SEEDS}; λ = 0 is SingleVL)",
        "",
        sweep_table(sweep),
        "",
        "## The paper's pattern, APFed ≥ SingleVL ≫ TVFL, per setting",
        "",
        *(f"- {line}" for line in pattern_lines(table)),
        "",
        f"Wall time {minutes:.1f} min with {WORKERS} workers.",
        "",
    ]
    OUT.mkdir(parents=True, exist_ok=True)
    png = plot_table(table, OUT / "apfed.png", title="digits: accuracy of the active party inferring alone")
    lambda_png = plot_sweep(sweep, OUT / "apfed_lambda.png", title=f"digits {SWEEP_SETTING}: accuracy against λ")
    return publish(lines, bench, OUT / "apfed.md", [png, lambda_png])


if __name__ == "__main__":
    raise SystemExit(main())
