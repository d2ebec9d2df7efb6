"""What leaks, measured: every attack probe on every algorithm, undefended and defended, over the real service.

``vfl-server`` and two recording passive parties (``bench.privacy_party``) start once, as OS
processes over mTLS, and take the jobs one after another through the Control API. For each task
× algorithm × defence setting the bench prints one row:

- utility: the job's final test ROC AUC (binary tasks) or accuracy (multi-class), and its cost:
  the difference from the undefended run of the same task and algorithm;
- each attack of ``vfltesting.privacy_probe`` on what passive party 3 (``ATTACKED_PARTY``) legitimately saw: the norm
  and direction (k = 1, 10) label attacks' ROC AUC at the last epoch, model completion on 1 % and
  5 % of labelled rows beside the same head on its raw features, and the active party's
  inversion of its features (R², MSE, and the MSE of predicting each feature's mean);
- ε where DP applies: label DP's configured ε, and the embedding noise's (ε at the job's δ) from
  its own accountant.

The plan is the tables below, chosen for coverage, not to reach the target: every algorithm
undefended, with a gradient perturbation and with label DP on every task, and the whole sweep of
defence settings on SplitNN and FedBCD on the imbalanced task (where the norm attack is
strongest) and on SplitNN on breast cancer. Each job draws its defences' noise from a fresh
secret key, so two runs of one defended setting differ: the target's settings (imbalanced,
SplitNN) run ``REPEATS`` times each, and the verdict is on their mean, the spread printed beside
it. Jobs are small (``JOB``) so that the 116 runs fit in about 15 minutes on two cores.

Writes ``bench/out/privacy/privacy.csv``, ``privacy.md`` (the table for ``docs/privacy.md``) and
``privacy.png`` (label attack AUC against test ROC AUC on the imbalanced task). The last line is
machine-readable:
``BENCH privacy_attack_auc <value> auc target <= 0.60 MET|MISSED`` (see ``bench.privacy_report``).
Exits 0 whether the target is met or missed.

``--quick`` (or ``PRIVACY_BENCH_QUICK=1``): the imbalanced task, SplitNN, undefended and with
Marvell, two epochs; the smoke test's mode. ``--tasks``, ``--algorithms`` and ``--settings`` narrow the plan.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.curves import OUT
from bench.machine import measured
from bench.privacy_report import (
    TARGET_ALGORITHM,
    TARGET_TASK,
    header,
    line,
    not_applicable,
    plot,
    verdict,
    write_csv,
    write_markdown,
)
from bench.privacy_runs import NAN, Outcome, PrivacyService, Run, execute
from bench.privacy_tasks import ATTACKED_PARTY, TASKS, Task
from vflclient import JobClient, VflError
from vfltesting.pki import issue_pki
from vfltesting.privacy_probe import NOT_APPLICABLE

#: Every defence setting the bench knows, by the name its rows carry: the job's ``[privacy]`` table.
SETTINGS: dict[str, dict[str, Any]] = {
    "none": {},
    "marvell-0.1": {"label_defence": "marvell", "marvell_sum_kl": 0.1},
    "marvell-0.25": {"label_defence": "marvell", "marvell_sum_kl": 0.25},
    "marvell-1": {"label_defence": "marvell", "marvell_sum_kl": 1.0},
    "max_norm": {"label_defence": "max_norm"},
    "gaussian-0.5": {"label_defence": "gaussian", "gradient_noise": 0.5},
    "gaussian-2": {"label_defence": "gaussian", "gradient_noise": 2.0},
    "label_dp-1": {"label_dp_epsilon": 1.0},
    "label_dp-3": {"label_dp_epsilon": 3.0},
    "embedding-0.5": {"embedding_clip": 1.0, "embedding_noise_multiplier": 0.5},
    "embedding-2": {"embedding_clip": 1.0, "embedding_noise_multiplier": 2.0},
}
#: Marvell shapes noise between two classes: binary tasks only.
BINARY_ONLY = frozenset(name for name, table in SETTINGS.items() if table.get("label_defence") == "marvell")

#: Every algorithm that exchanges per-row tensors, bar one (``LEFT_OUT``).
ALGORITHMS = ("splitnn", "fedbcd", "async", "vimsgd", "vimadmm", "vimadmm_j", "apfed_r", "apfed_c")
LEFT_OUT = {
    "adptvfedconv": "its parties hold pieces of one image (convolutional bottoms over 8x8 quadrants); "
    "these tasks are tabular",
}
#: The defences every algorithm also runs with, by task kind (binary or not): a gradient perturbation
#: (Marvell, the issue's first, on binary tasks), which only algorithms that send gradients down
#: accept (the others' rows say why they refuse it), and label DP, which every algorithm accepts.
EVERY_ALGORITHM = {True: ("marvell-0.25", "label_dp-1"), False: ("gaussian-2", "label_dp-1")}
#: (task, algorithm) pairs that run every setting of ``SETTINGS``.
SWEPT = frozenset({("imbalanced", "splitnn"), ("imbalanced", "fedbcd"), ("cancer", "splitnn")})

#: The job settings every run shares; small, so that the whole plan fits in about 15 minutes.
JOB: dict[str, Any] = {
    "epochs": 10,
    "batch_size": 64,
    "embedding_dim": 8,
    "bottom_hidden": [32],
    "optimizer": "adam",
    "learning_rate": 0.005,
}
QUICK_JOB = {**JOB, "epochs": 2}
#: Runs of each defended setting of the target's pair (imbalanced, SplitNN); the verdict is on their mean.
REPEATS = 3
#: The smoke test's plan: the target's task and algorithm, undefended and with one defence.
QUICK_TASKS, QUICK_ALGORITHMS, QUICK_SETTINGS = ("imbalanced",), ("splitnn",), ("none", "marvell-0.25")


def plan(
    tasks: Sequence[str], algorithms: Sequence[str], settings: Sequence[str] | None, repeats: int = 1
) -> list[Run]:
    """The runs, task by task and algorithm by algorithm, each algorithm's undefended run first.

    ``settings`` None: the tables' plan (``SWEPT`` pairs all settings, the rest "none" and
    ``EVERY_ALGORITHM``); else exactly those settings. Marvell is left out of multi-class tasks.
    The target's pair (``TARGET_TASK``, ``TARGET_ALGORITHM``) runs each defended setting
    ``repeats`` times: its verdict is on the mean, since each job draws fresh secret noise.
    """
    runs: list[Run] = []
    for task_name in tasks:
        binary = TASKS[task_name]().binary
        for algorithm in algorithms:
            if settings is not None:
                chosen = list(settings)
            elif (task_name, algorithm) in SWEPT:
                chosen = list(SETTINGS)
            else:
                chosen = ["none", *EVERY_ALGORITHM[binary]]
            chosen = [s for s in chosen if binary or s not in BINARY_ONLY]
            target = (task_name, algorithm) == (TARGET_TASK, TARGET_ALGORITHM)
            for setting in chosen:
                copies = repeats if target and setting != "none" else 1
                runs.extend(Run(task_name, algorithm, setting, SETTINGS[setting], r) for r in range(copies))
    return runs


def run_plan(runs: Sequence[Run], job: dict[str, Any], root: Path) -> list[Outcome]:
    """Start the service once, run every job in order (printing each row as it ends), stop the service."""
    tasks: dict[str, Task] = {name: TASKS[name]() for name in dict.fromkeys(r.task for r in runs)}
    pki = issue_pki(root / "pki", (2, 3))
    datasets = {name: task.write(root / "data" / name) for name, task in tasks.items()}
    service = PrivacyService(root, pki, datasets[next(iter(datasets))], serving=False, datasets=datasets)
    outcomes: list[Outcome] = []
    baselines: dict[tuple[str, str], float] = {}
    try:
        service.start_server()
        service.start_clients()
        print(header(), flush=True)
        with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
            for run in runs:
                outcome = execute(service, jobs, run, tasks[run.task], job)
                if run.setting == "none":
                    baselines[(run.task, run.algorithm)] = outcome.utility
                outcomes.append(outcome)
                print(line(outcome, baselines.get((run.task, run.algorithm), NAN)), flush=True)
    except (VflError, RuntimeError, OSError) as exc:
        print(f"\nbench failed: {type(exc).__name__}: {exc}\n{service.tail(20)}", file=sys.stderr, flush=True)
    finally:
        codes = service.stop()
    if any(codes.values()):
        print(f"daemon exit codes on SIGTERM: {codes}")
    failed = [o for o in outcomes if o.state not in ("finished", "refused")]  # a refusal says why in its row
    if failed:
        print(f"{len(failed)} run(s) did not finish; the daemons' logs end:\n{service.tail(8)}", file=sys.stderr)
    return outcomes


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.privacy", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", default=os.environ.get("PRIVACY_BENCH_QUICK") == "1")
    p.add_argument("--tasks", nargs="+", choices=list(TASKS), help=f"default: {' '.join(TASKS)}")
    p.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, help="default: all")
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), help="default: the plan's tables")
    p.add_argument("--repeats", type=int, default=None, help=f"runs per defended target setting (default {REPEATS})")
    p.add_argument("--out", type=Path, default=OUT / "privacy", help="where the CSV and the plot go")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else REPEATS
    tasks: Sequence[str] = args.tasks or (QUICK_TASKS if args.quick else tuple(TASKS))
    algorithms: Sequence[str] = args.algorithms or (QUICK_ALGORITHMS if args.quick else ALGORITHMS)
    runs = plan(tasks, algorithms, args.settings or (QUICK_SETTINGS if args.quick else None), args.repeats)
    job = QUICK_JOB if args.quick else JOB
    print(
        f"== privacy: {len(runs)} jobs ({', '.join(tasks)} x {', '.join(algorithms)}), {job['epochs']} epochs "
        f"each, on one vfl-server and two recording passive parties (processes, mTLS); "
        f"attacker: party {ATTACKED_PARTY} =="
    )
    for algorithm, why in LEFT_OUT.items():
        print(f"not run: {algorithm}: {why}")
    if any(not TASKS[t]().binary for t in tasks):
        print(f"not run on multi-class tasks: {', '.join(sorted(BINARY_ONLY))} (Marvell separates two classes)")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vfl-bench-privacy-") as tmp:
        outcomes, window = measured(lambda: run_plan(runs, job, Path(tmp)), own_children=True)
    print("\na dash is an attack that does not apply, or a figure not produced; where one does not apply, why:")
    print("\n".join(not_applicable(NOT_APPLICABLE, any(not TASKS[t]().binary for t in tasks))))
    baselines = {(o.run.task, o.run.algorithm): o.utility for o in outcomes if o.run.setting == "none"}
    print(f"\nwrote {write_csv(outcomes, baselines, args.out / 'privacy.csv')}")
    print(f"wrote {write_markdown(outcomes, baselines, args.out / 'privacy.md')}")
    picture = plot(outcomes, args.out / "privacy.png")
    if picture is not None:
        print(f"wrote {picture}")
    steal = f"{window.steal:.2f}" if window.steal is not None else "unknown"
    print(f"{len(outcomes)} jobs in {time.perf_counter() - started:.0f} s; hypervisor steal {steal} CPUs")
    for text in verdict(outcomes):
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
