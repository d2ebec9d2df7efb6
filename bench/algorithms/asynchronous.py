"""Wall time for a fixed number of client updates, asynchronous VFL against synchronous, under delay.

The thesis's round-robin delay scenario (002 §5.4.2), from the job's own delay injector
(``vflalgorithms.delays``): time is cut into 0.2 s slots that alternate between the two passive
parties, and a party about to send during its own slot sleeps until the slot ends, so one
party at a time is asleep. Synchronous SplitNN must wait for the sleeping party at every step;
asynchronous VFL (``async``) lets the awake party train on, up to ``max_staleness`` = 15
batches ahead of the slowest.

Both jobs run as the product runs them: vfl-server and two vfl-client processes over mTLS, the
example digits split, batch 64, the same models and seed; each party makes 2 epochs x 15
batches = 30 updates, 60 in all. Timed: the server's training epochs (summary.json seconds,
which include the end-of-epoch evaluation). Ends with one BENCH line: async wall time as a
fraction of sync (target: at most 1/5).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from bench.common.jobs import run_jobs
from bench.common.versions import versions_line
from vfltesting.datasets import write_digits_split
from vfltesting.jobs import DIGITS_JOB
from vfltesting.pki import issue_pki

TARGET_FRACTION = 1 / 5
DELAY = {"delay": "round_robin", "delay_s": 0.2}
BASE = replace(DIGITS_JOB, job_id="")
JOBS = [
    replace(BASE, job_id="sync-delayed", algorithm="splitnn", algorithm_options=DELAY),
    replace(BASE, job_id="async-delayed", algorithm="async", algorithm_options={**DELAY, "max_staleness": 15}),
]


def main() -> int:
    print("== asynchronous vs synchronous VFL under the round-robin delay (one party asleep at a time, 0.2 s slots) ==")
    print("   digits, 2 passive parties x 30 updates each; vfl-server + 2 vfl-client processes over mTLS", flush=True)
    print(versions_line("torch", "numpy", "grpcio"), flush=True)
    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="vfl-bench-async-") as tmp:
        root = Path(tmp)
        issue_pki(root / "certs", BASE.passive_parties)
        write_digits_split(root / "data")
        try:
            runs = list(run_jobs(root, JOBS, certs=root / "certs", data=root / "data", top_hidden=(64,)))
        except RuntimeError as exc:
            print(f"bench failed: {exc}")
            return 1
        for job, summary in runs:
            seconds = [float(e["seconds"]) for e in summary["epochs"]]
            walls[job.algorithm] = sum(seconds)
            accuracy = summary["final_metrics"]["accuracy"]
            print(
                f"   {job.algorithm:<8} training wall {sum(seconds):6.2f} s (epochs: "
                f"{' '.join(f'{s:.2f}' for s in seconds)}), final test accuracy {accuracy:.3f}",
                flush=True,
            )
    fraction = walls["async"] / walls["splitnn"]
    print(f"async / sync wall time for the same 60 client updates: {fraction:.3f}")
    met = fraction <= TARGET_FRACTION
    print(f"BENCH async_vs_sync_wall {fraction:.3f} x target <= {TARGET_FRACTION:.3f} {'MET' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
