"""Where each algorithm lands against its authors' own figures: ``shared/ORACLES.md`` §1, row by row.

Each row runs as the product runs it: ``vfl-server`` and four ``vfl-client`` daemons as separate
processes over mTLS on 127.0.0.1, with the VIM authors' digits data, layout, client model and
settings (``bench.algorithms.oracle_settings``), 100 epochs (500 rounds, as theirs), 3 seeds.
Printed side by side with the authors': final accuracy (mean ± std), accuracy after 5, 10, 25,
50, 100, 250 and 500 rounds, rounds to 90 % and 95 %, whether a run diverged, seconds per job.
``bench/out/oracles.png`` plots ours against theirs, accuracy against rounds, one panel per row.
The last line is ``BENCH oracle_worst_shortfall <points> pt target <= 1.0 MET|MISSED``: the largest
(authors' mean final accuracy - ours) over the rows run; a run that diverges counts as 100.

The service tests on the authors' own 540 test rows (the active party's ``held_out_ids``), sets
10 % of the training rows aside for validation as they do (the same count, other rows: our job's
seed draws them), and scores the test rows after every round (``eval_every_rounds = 1``), so
"after R rounds" and "rounds to X %" are by the round, as theirs. ``--inprocess`` trains the
in-process references instead (no wire), with the authors' own split and validation rows left
out, scored at epoch ends (every 5 rounds): the quick check while you work.

``--rows vimadmm,splitnn`` runs a subset; ``--seeds`` and ``--epochs`` shorten it.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.algorithms.oracle_settings import (
    FACTORY,
    PASSIVE,
    ROUNDS,
    ROUNDS_PER_EPOCH,
    ROWS,
    ConMLP,
    Row,
    oracle_job,
    oracle_tensors,
    write_oracle_data,
)
from bench.common.jobs import run_federated, write_configs
from bench.common.paths import OUT
from bench.common.plots import pyplot
from bench.common.stats import mean_std
from bench.common.versions import versions_line
from vflalgorithms.registry import algorithm_spec
from vflcore.job.schedule import model_seed
from vflcore.ml.models import build_seeded
from vflcore.ml.optimizers import role_optimizer
from vfltesting.pki import issue_pki

TARGET_POINTS = 1.0
DIVERGED_POINTS = 100.0
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    """One seed of one row: test accuracy (%) after each scored round (ascending), and the job's wall time."""

    rounds: list[int]
    accuracy: list[float]
    seconds: float
    diverged: bool

    def after(self, rounds: int) -> float | None:
        return dict(zip(self.rounds, self.accuracy, strict=True)).get(rounds)

    def rounds_to(self, percent: float) -> int | None:
        return next((r for r, a in zip(self.rounds, self.accuracy, strict=True) if a >= percent), None)


def scored_rounds(summary: dict[str, Any]) -> tuple[list[int], list[float]]:
    """(rounds, accuracy %) from ``summary.json``: the scores inside each epoch, then its end's."""
    scores: dict[int, float] = {}
    for epoch in summary["epochs"]:
        for score in epoch["rounds"]:
            scores[int(score["round"])] = 100.0 * float(score["metrics"]["accuracy"])
        scores[(epoch["epoch"] + 1) * ROUNDS_PER_EPOCH] = 100.0 * float(epoch["metrics"]["accuracy"])
    return sorted(scores), [scores[r] for r in sorted(scores)]


def run_service(row: Row, seed: int, epochs: int, root: Path) -> Run:
    """``row`` as a real job: the server and four daemons over mTLS, the authors' client model by factory."""
    job = oracle_job(row, seed, epochs)
    job_root = root / job.job_id
    job_root.mkdir()
    write_configs(
        job_root,
        job,
        certs=root / "certs",
        data=root / "data",
        top_hidden=row.top_hidden,
        top_dropout=row.top_dropout,
        party_factory=FACTORY,
        held_out_ids=root / "data" / "test_ids.txt",
    )
    start = time.perf_counter()
    try:
        summary = run_federated(job_root, job, timeout_s=3000)
    except RuntimeError as exc:
        said = str(exc)
        if "diverged" not in said:
            raise
        print(f"   {row.name} seed {seed}: {said.splitlines()[0][:300]}", flush=True)
        return Run([], [], time.perf_counter() - start, diverged=True)
    return Run(*scored_rounds(summary), time.perf_counter() - start, diverged=False)


def run_inprocess(row: Row, seed: int, epochs: int) -> Run:
    """``row``'s in-process reference, with the authors' own split and their validation rows left out."""
    features, labels, train = oracle_tensors(seed)
    job = replace(oracle_job(row, seed, epochs), num_rows=len(labels))
    reference = algorithm_spec(row.algorithm).reference_class()(
        job, features, labels, top_hidden=row.top_hidden, top_dropout=row.top_dropout
    )
    for party in PASSIVE:  # the authors' client model, seeded as the party seeds its own
        reference.bottoms[party] = build_seeded(lambda: ConMLP(16, 60), model_seed(seed, party, "bottom"))
        reference.bottom_optimizers[party] = role_optimizer(job, "bottom", reference.bottoms[party].parameters())
    reference.schedule.train_rows = np.arange(train)
    reference.schedule.test_rows = test = np.arange(train, len(labels))
    start, accuracy = time.perf_counter(), list[float]()
    for epoch in range(epochs):
        reference.train_epoch(epoch)
        if not math.isfinite(reference.step_losses[-1]):
            return Run(_epoch_ends(accuracy), accuracy, time.perf_counter() - start, diverged=True)
        with torch.no_grad():
            predicted = reference.predict(test).argmax(dim=1).numpy()
        accuracy.append(100.0 * float(np.mean(predicted == labels[test].numpy())))
    return Run(_epoch_ends(accuracy), accuracy, time.perf_counter() - start, diverged=False)


def _epoch_ends(accuracy: list[float]) -> list[int]:
    return [ROUNDS_PER_EPOCH * (epoch + 1) for epoch in range(len(accuracy))]


def _pm(values: list[float], spec: str = ".2f") -> str:
    if not values:
        return "never"
    mean, std = mean_std(values)
    return f"{mean:{spec}} ± {std:{spec}}"


def report(row: Row, runs: list[Run]) -> float:
    """Print ``row``'s lines beside the authors'; return its shortfall (authors' mean final - ours)."""
    authors = row.authors
    finished = [run for run in runs if not run.diverged]
    finals = [run.accuracy[-1] for run in finished]
    shortfall = DIVERGED_POINTS if len(finished) < len(runs) or not finals else authors.final[0] - mean_std(finals)[0]
    after = []
    for rounds in ROUNDS:
        ours = [a for run in finished if (a := run.after(rounds)) is not None]
        theirs = authors.after.get(rounds)
        if ours:
            after.append(f"{rounds}: {np.mean(ours):.1f}/{'-' if theirs is None else f'{theirs:.1f}'}")
    print(f"{row.name:<11} final {_pm(finals):>14} (authors {authors.final[0]:.2f} ± {authors.final[1]:.2f})", end="")
    print(f"  shortfall {shortfall:+.2f} pt  diverged {len(runs) - len(finished)}/{len(runs)}", end="")
    print(f"  {np.mean([run.seconds for run in runs]):.0f} s/job")
    print(f"{'':<11} after R rounds, ours/authors': {'  '.join(after)}")
    for percent, target in ((90.0, authors.to_90), (95.0, authors.to_95)):
        reached = [r for run in finished if (r := run.rounds_to(percent)) is not None]
        missed = len(finished) - len(reached)
        print(
            f"{'':<11} rounds to {percent:.0f} %: {_pm([float(r) for r in reached], '.0f')}"
            f"{f' ({missed} never)' if missed else ''} (authors {target[0]:.0f} ± {target[1]:.0f})"
        )
    return shortfall


def plot(results: dict[str, list[Run]], path: Path) -> Path:
    """Accuracy against rounds, one panel per row: our mean per scored round, the authors' points."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    for ax, (name, runs) in zip(axes[0], results.items(), strict=True):
        finished = [run for run in runs if not run.diverged and run.accuracy]
        if finished:
            length = min(len(run.accuracy) for run in finished)
            mean = np.mean([run.accuracy[:length] for run in finished], axis=0)
            ax.plot(finished[0].rounds[:length], mean, label="this project (mean)")
        theirs = ROWS[name].authors.after
        if theirs:
            ax.plot(list(theirs), list(theirs.values()), "o", label="authors' code")
        ax.axhline(ROWS[name].authors.final[0], linestyle=":", color="grey")
        ax.set_xscale("log")
        ax.set_ylim(40, 100)
        ax.set_title(name)
        ax.set_xlabel("rounds")
    axes[0][0].set_ylabel("test accuracy (%)")
    axes[0][0].legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    parser.add_argument("--seeds", default="100,200,300", help="comma-separated job seeds (the authors': 100,200,300)")
    parser.add_argument("--epochs", type=int, default=100, help="5 rounds each; the authors ran 100")
    parser.add_argument("--inprocess", action="store_true", help="the in-process references, with the authors' split")
    args = parser.parse_args()
    rows = [ROWS[name] for name in args.rows.split(",")]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    where = "in process (the references)" if args.inprocess else "vfl-server + 4 vfl-client processes over mTLS"
    print(f"== the seed papers' own settings on digits, against their authors' figures (shared/ORACLES.md): {where} ==")
    print(versions_line("torch", "numpy", "scikit-learn"), flush=True)
    # The daemons import the authors' client model from this repository (``[model] factory``).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    results: dict[str, list[Run]] = {}
    with tempfile.TemporaryDirectory(prefix="vfl-bench-oracles-") as tmp:
        root = Path(tmp)
        if not args.inprocess:
            issue_pki(root / "certs", PASSIVE)
            write_oracle_data(root / "data")
        for row in rows:
            results[row.name] = [
                run_inprocess(row, seed, args.epochs) if args.inprocess else run_service(row, seed, args.epochs, root)
                for seed in seeds
            ]
            print(f"   {row.name}: {len(seeds)} seeds done", flush=True)
    print()
    shortfalls = {row.name: report(row, results[row.name]) for row in rows}
    print(f"plot: {plot(results, OUT / 'oracles.png')}")
    worst = max(shortfalls, key=lambda name: shortfalls[name])
    value = shortfalls[worst]
    print(f"worst row: {worst}")
    print(
        f"BENCH oracle_worst_shortfall {value:.2f} pt target <= {TARGET_POINTS:.1f} "
        f"{'MET' if value <= TARGET_POINTS else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
