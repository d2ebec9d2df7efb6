"""What leaks, measured: every attack probe on every algorithm, undefended and defended, over the real service.

``vfl-server`` and two recording passive parties (``bench.privacy.party``) start once, as OS
processes over mTLS, and take the jobs one after another through the Control API. Each task ×
algorithm × defence setting is a cell, run for ``SEEDS`` job seeds (each job also draws its
defence's noise from a fresh secret key). Every run prints one line:

- utility: the job's final test ROC AUC (binary tasks) or accuracy (multi-class), and its cost:
  the difference from the undefended run of the same task, algorithm and seed;
- each attack of ``vfltesting.privacy_probe`` on what passive party 3 (``ATTACKED_PARTY``)
  legitimately received or sent, the tensor that crossed the wire (``PROBED``): the norm and
  direction (k = 1, 10) label attacks' ROC AUC at the last epoch (for VIMADMM and VIMADMM-J on
  λ_B and, on its own, on s^k_B), model completion on 1 % and 5 % of labelled rows beside the same
  head on its raw features, and the active party's inversion of its features;
- ε where DP applies: label DP's configured ε, and the embedding noise's (a passive party's, or
  the active party's on APFed's h^A) from its own accountant.

Then every cell as a mean and a 95 % interval over its seeds (``bench.privacy.cells``), the
frontier plot (a panel per algorithm), and the verdict per algorithm (``bench.privacy.report``).
The default plan is the target's: two binary tasks (``TASKS_JUDGED``: the imbalanced one and
cancer), every algorithm that exchanges per-row tensors (APFed-R, whose h^A is APFed-C's, runs
with ``--algorithms``), each with the settings that apply to it (``SETTINGS_OF``), ``SEEDS``
seeds each: 282 jobs.

Writes ``bench/out/privacy/privacy.csv`` (every run), ``privacy.md`` (the cells, for
``docs/explanation/privacy.md``) and ``privacy.png``. The last line is machine-readable:
``BENCH privacy_worst_algorithm_attack_auc <value> auc target <= 0.60 MET|MISSED``.
Exits 0 whether the target is met or missed.

``--quick`` (or ``PRIVACY_BENCH_QUICK=1``): the imbalanced task, SplitNN, undefended and with
Marvell, one seed, two epochs; the smoke test's mode. ``--tasks``, ``--algorithms``, ``--settings``
and ``--seeds`` change the plan.
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

from bench.common.machine import measured
from bench.common.paths import OUT
from bench.common.versions import versions_line
from bench.privacy.cells import cells
from bench.privacy.plan import (
    ALGORITHMS,
    BINARY_ONLY,
    JOB,
    KNOWN_ALGORITHMS,
    LEFT_OUT,
    QUICK_ALGORITHMS,
    QUICK_JOB,
    QUICK_SETTINGS,
    QUICK_TASKS,
    SEEDS,
    SETTINGS,
    TASKS_JUDGED,
    plan,
)
from bench.privacy.report import (
    cell_table,
    header,
    line,
    not_applicable,
    plot,
    verdict,
    write_csv,
    write_markdown,
)
from bench.privacy.runs import NAN, Outcome, PrivacyService, Run, execute
from bench.privacy.tasks import ATTACKED_PARTY, TASKS, Task
from vflclient import JobClient, VflError
from vfltesting.pki import issue_pki
from vfltesting.privacy_probe import NOT_APPLICABLE


def run_plan(runs: Sequence[Run], job: dict[str, Any], root: Path) -> list[Outcome]:
    """Start the service once, run every job in order (printing each row as it ends), stop the service."""
    tasks: dict[str, Task] = {name: TASKS[name]() for name in dict.fromkeys(r.task for r in runs)}
    pki = issue_pki(root / "pki", (2, 3))
    datasets = {name: task.write(root / "data" / name) for name, task in tasks.items()}
    service = PrivacyService(root, pki, datasets[next(iter(datasets))], serving=False, datasets=datasets)
    outcomes: list[Outcome] = []
    baselines: dict[tuple[str, str, int], float] = {}
    try:
        service.start_server()
        service.start_clients()
        service.wait_connected()  # a job submitted before a party connects waits only its join timeout
        print(header(), flush=True)
        with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
            for run in runs:
                outcome = execute(service, jobs, run, tasks[run.task], job)
                if run.setting == "none":
                    baselines[(run.task, run.algorithm, run.seed)] = outcome.utility
                outcomes.append(outcome)
                print(line(outcome, baselines.get((run.task, run.algorithm, run.seed), NAN)), flush=True)
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
    p.add_argument("--tasks", nargs="+", choices=list(TASKS), help=f"default: {' '.join(TASKS_JUDGED)}")
    p.add_argument("--algorithms", nargs="+", choices=KNOWN_ALGORITHMS, help=f"default: {' '.join(ALGORITHMS)}")
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), help="default: the plan's tables")
    p.add_argument("--seeds", type=int, default=None, help=f"job seeds per cell (default {SEEDS}; --quick: 1)")
    p.add_argument("--out", type=Path, default=OUT / "privacy", help="where the CSV and the plot go")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    if args.seeds is None:
        args.seeds = 1 if args.quick else SEEDS
    tasks: Sequence[str] = args.tasks or (QUICK_TASKS if args.quick else TASKS_JUDGED)
    algorithms: Sequence[str] = args.algorithms or (QUICK_ALGORITHMS if args.quick else ALGORITHMS)
    runs = plan(tasks, algorithms, args.settings or (QUICK_SETTINGS if args.quick else None), args.seeds)
    job = QUICK_JOB if args.quick else JOB
    print(
        f"== privacy: {len(runs)} jobs ({', '.join(tasks)} x {', '.join(algorithms)}, {args.seeds} seeds a cell), "
        f"{job['epochs']} epochs "
        f"each, on one vfl-server and two recording passive parties (processes, mTLS); "
        f"attacker: party {ATTACKED_PARTY} =="
    )
    print(versions_line("torch", "opacus", "numpy", "scikit-learn"))
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
    found = cells(outcomes)
    print("\ncells: mean [95 % interval] over the seeds; cost paired with the undefended run of the same seed")
    print("\n".join(cell_table(found)))
    print(f"\nwrote {write_csv(outcomes, args.out / 'privacy.csv')}")
    print(f"wrote {write_markdown(found, args.out / 'privacy.md')}")
    picture = plot(found, args.out / "privacy.png")
    if picture is not None:
        print(f"wrote {picture}")
    steal = f"{window.steal:.2f}" if window.steal is not None else "unknown"
    print(f"{len(outcomes)} jobs in {time.perf_counter() - started:.0f} s; hypervisor steal {steal} CPUs")
    for text in verdict(found):
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
