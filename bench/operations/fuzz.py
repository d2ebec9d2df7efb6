"""The fuzz campaign at scale: at least 100,000 cases over every input surface while honest jobs train.

``vfltesting.fuzz.campaign`` does the work: ``vfl-server`` with its inference endpoint and console,
two ``vfl-client`` daemons as processes, a reference APFed-C job, then honest copies of it, one
after another, while Hypothesis sends random and mutated inputs at every surface: the federation
RPCs (as party 4, outside the job, and as party 3, inside it), PSI's chunk streams out of order,
every Control RPC, job documents with mutated ``[privacy]`` and ``[distill]`` tables, tables the
server reads at submission (CSV and Parquet, broken), both inference protocols, the console's
routes; in the campaign's own process the reader, PSI on IDs of any script and length, and a
party's config; then sample IDs by ID at a served federated model.

It prints the cases and statuses per target, the cases per surface, every failing case with the
command that replays it, the daemons that died, and how the honest jobs and the served model
compare. Last line: ``BENCH fuzz_failures <n> target <= 0 MET|MISSED``, where n counts failing
cases, dead daemons, (as one each) an honest job's loss or final-weight difference over 1e-6, and
(as one) a served prediction that changed. The exit code is 0 either way, 1 only if the campaign could not run.

``--target LABEL --seed S --cases N --stop-at I`` replays one target's cases up to case I, as a
failure's ``replay:`` line says.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.common.versions import versions_line
from vfltesting.datasets import write_digits_split
from vfltesting.fuzz.campaign import run_campaign
from vfltesting.fuzz.live import CALLER
from vfltesting.fuzz.report import Report, failed
from vfltesting.pki import issue_pki

CASES = 100_000
#: The reference job's epochs, and each honest job's: short, so that many run during the campaign.
EPOCHS = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=CASES, help=f"cases in all (default {CASES})")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"of each honest job (default {EPOCHS})")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis's seed (default 0)")
    parser.add_argument("--target", default=None, help="replay: drive this target alone (its label in the report)")
    parser.add_argument("--stop-at", type=int, default=None, help="replay: send the target's cases up to this one")
    args = parser.parse_args(argv)
    scope = f"target {args.target!r}" if args.target else "every surface"
    print(
        f"== fuzz campaign: {args.cases} cases at {scope}, "
        f"honest APFed-C jobs of {args.epochs} epochs, seed {args.seed} =="
    )
    print(versions_line("hypothesis", "grpcio", "protobuf", "aiohttp", "pyarrow"))
    with tempfile.TemporaryDirectory(prefix="vfl-bench-fuzz-") as tmp:
        root = Path(tmp)
        pki = issue_pki(root / "pki", (2, 3, 4), callers=(CALLER,))
        data = root / "data"
        data.mkdir()
        write_digits_split(data, seed=0)
        try:
            report = run_campaign(
                root / "service",
                pki,
                data,
                cases=args.cases,
                seed=args.seed,
                epochs=args.epochs,
                only=args.target,
                stop_at=args.stop_at,
            )
        except (RuntimeError, AssertionError) as exc:  # a job that failed; a wait that timed out
            print(f"bench failed: {exc}")
            return 1
    _print(report)
    return 0


def _print(report: Report) -> None:
    for line in report.lines():
        print(line)
    reasons = failed(report)
    print(f"{report.total} cases in {report.seconds:.0f} s ({report.total / max(report.seconds, 1e-9):.0f} per second)")
    print(f"daemons that died: {report.crashed or 'none'}")
    still = "one still training" if report.honest_running_at_end else "none training"
    print(
        f"honest jobs: {report.honest_jobs}, {still} when the last live case was sent; "
        f"largest difference from the reference: per-step loss {report.loss_difference:.3g}, "
        f"final weights {report.weight_difference:.3g}"
    )
    if report.predictions_unchanged is not None:
        same = "unchanged" if report.predictions_unchanged else "CHANGED"
        print(f"the served federated model's predictions for known IDs: {same} by the by-ID cases")
    for reason in reasons[:50]:
        print(f"FAILURE {reason}")
    count = (
        len(report.failures)
        + len(report.crashed)
        + (not report.loss_difference <= 1e-6)
        + (not report.weight_difference <= 1e-6)
        + (report.predictions_unchanged is False)
    )
    print(f"BENCH fuzz_failures {count} target <= 0 {'MET' if count == 0 else 'MISSED'}")


if __name__ == "__main__":
    raise SystemExit(main())
