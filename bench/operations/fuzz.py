"""The fuzz campaign at scale: at least 10,000 cases against a live service while an honest job trains.

``vfltesting.fuzz.campaign`` does the work: ``vfl-server`` with its inference endpoint and two
``vfl-client`` daemons as processes, a reference APFed-C job, then the same job again while
Hypothesis sends random and mutated messages to every federation RPC (as party 4, outside the
job, and as party 3, inside it), every Control RPC (as an operator) and both inference
protocols (as a caller). It prints the cases tried and the statuses returned per target, every
failing case, the daemons that died, and the honest job's largest per-step loss difference from
the reference job.

Last line: ``BENCH fuzz_failures <n> target <= 0 MET|MISSED``, where n counts failing cases, dead
daemons and (as one) a loss difference over 1e-6. The exit code is 0 either way, 1 only if the
campaign itself could not run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.common.versions import versions_line
from vfltesting.datasets import write_digits_split
from vfltesting.fuzz.campaign import CALLER, epochs_for, failed, run_campaign
from vfltesting.pki import issue_pki

CASES = 10_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=CASES, help=f"cases in all (default {CASES})")
    parser.add_argument("--epochs", type=int, default=0, help="of the honest job (default: cases / 25)")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis's seed (default 0)")
    args = parser.parse_args(argv)
    args.epochs = args.epochs or epochs_for(args.cases)
    print(f"== fuzz campaign: {args.cases} cases, honest APFed-C job of {args.epochs} epochs, seed {args.seed} ==")
    print(versions_line("hypothesis", "grpcio", "protobuf", "aiohttp"))
    with tempfile.TemporaryDirectory(prefix="vfl-bench-fuzz-") as tmp:
        root = Path(tmp)
        pki = issue_pki(root / "pki", (2, 3, 4), callers=(CALLER,))
        data = root / "data"
        data.mkdir()
        write_digits_split(data, seed=0)
        try:
            report = run_campaign(root / "service", pki, data, cases=args.cases, seed=args.seed, epochs=args.epochs)
        except RuntimeError as exc:
            print(f"bench failed: {exc}")
            return 1
    for line in report.lines():
        print(line)
    reasons = failed(report)
    print(f"{report.total} cases in {report.seconds:.0f} s ({report.total / max(report.seconds, 1e-9):.0f} per second)")
    print(f"daemons that died: {report.crashed or 'none'}")
    still = "still training" if report.honest_running_at_end else "had finished"
    print(f"honest job: {still} when the last case was sent; loss difference {report.loss_difference:.3g}")
    for reason in reasons[:50]:
        print(f"FAILURE {reason}")
    count = len(report.failures) + len(report.crashed) + (report.loss_difference > 1e-6)
    print(f"BENCH fuzz_failures {count} target <= 0 {'MET' if count == 0 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
