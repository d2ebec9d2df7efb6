"""Training over an emulated WAN: wall time, bytes and rounds to a fixed accuracy, per algorithm and codec.

Parties in vertical FL talk over a WAN. This bench runs the product as it is deployed
(``vfl-server`` and two ``vfl-client`` daemons as separate processes, mutual TLS) with each
passive party dialling the server through its own emulated link (``vfltesting.wan.WanProxy``:
one-way delay and a token-bucket rate per direction; the proxy relays ciphertext), on
``make bench-overhead``'s workload: 60,000 synthetic rows, features 40 / 60 / 60, batch 1,024,
embedding 60, 56 training steps per epoch, one torch thread per process.

Per link (20 ms RTT at 100 Mbit/s, 50 ms RTT at 20 Mbit/s), per algorithm (SplitNN, FedBCD
Q = 5, VIMSGD, VIMADMM, async) and per wire codec (fp32, bf16, int8) one row, and as many again
for the overlap options (``OVERLAP``): SplitNN and FedBCD with every batch in 4 parts
(``[algorithm] micro_batches``, the same maths), and SplitNN with 4 batches sent ahead of the
gradient awaited (``pipeline_depth``, staleness: other maths, never a default). Each row gives:

- **time**: the server's seconds of training and evaluation, summed over the epochs up to the
  first whose held-out accuracy reaches ``TARGET_ACCURACY`` (alignment and start-up excluded);
- **bytes**: the training traffic of those epochs, both directions, every party, counted after
  encoding (``summary.json``'s ``wire_mb``);
- **rounds**: the communication rounds (batches) of those epochs;
- **accuracy**: at that epoch (or the last one, if the target was not reached);
- **ratio**: the time divided by the in-process reference's time to the same target, measured in
  this run: the same algorithm's reference (``bench.operations.wan_reference``), run before and after the
  federated jobs (the faster of the two). Async has no in-process reference (its order of
  arrivals is the network's); its rows are divided by SplitNN's.

Accuracy is measured once per epoch on both sides, so a time to target is a whole number of
epochs on both sides too. A job runs one epoch; one that misses the target runs again with
``RETRY_EPOCHS``. ``TARGET_ACCURACY`` (0.98) was fixed before measuring, from the yardstick in
docs/explanation/performance.md (every reference reaches it in its first epoch).

The last line: ``BENCH wan_best_vs_inprocess <x> x target <= 1.5 MET|MISSED``, where x is the
fastest configuration's time to the target on the 20 ms / 100 Mbit/s link divided by its own
algorithm's in-process time. The line before it gives SplitNN fp32's ratio on that link, and the
one before that the fastest configuration against the fastest in-process reference of any
algorithm. The exit code is 0 whether the target is met or missed, and 1 if a job failed.

    .venv/bin/python -m bench.operations.wan [--links 0,1] [--algorithms splitnn,...] [--codecs fp32,...] [--epochs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.common.jobs import run_federated, write_configs
from bench.common.machine import measured
from bench.common.versions import versions_line
from bench.operations.overhead import FEATURES_PER_PARTY, JOB, ROWS, TOP_HIDDEN, TORCH_THREADS
from bench.operations.wan_reference import curve
from vflalgorithms.splitnn.overlap import overlap_options
from vflcore.job.spec import JobSpec
from vflcore.runtime.daemon import prepare_compute
from vfltesting.datasets import write_synthetic_split
from vfltesting.pki import issue_pki
from vfltesting.wan import LINKS, LinkProfile, WanProxy

#: Held-out accuracy every configuration trains to; chosen before measuring (see the docstring).
TARGET_ACCURACY = 0.98
#: The bound on the best configuration's time to target over the in-process time (issue 17).
TARGET_RATIO = 1.5
CODECS = ("fp32", "bf16", "int8")
#: Each algorithm's options, and the in-process reference its rows are divided by.
ALGORITHMS: dict[str, tuple[dict[str, Any], str]] = {
    "splitnn": ({}, "splitnn"),
    "fedbcd": ({"local_steps": 5}, "fedbcd"),
    "vimsgd": ({}, "vimsgd"),
    "vimadmm": ({}, "vimadmm"),
    "async": ({}, "splitnn"),
}
#: The overlap options measured besides each algorithm's plain rows: every batch in 4 parts
#: (the same maths), and for SplitNN also 4 batches sent ahead (staleness: other maths).
OVERLAP: dict[str, list[dict[str, int]]] = {
    "splitnn": [{"micro_batches": 4}, {"pipeline_depth": 4}],
    "fedbcd": [{"micro_batches": 4}],
}
#: A run that misses the target in its first epoch runs again with this many.
RETRY_EPOCHS = 3
TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Config:
    """One federated run: an algorithm with its options, a wire codec, and the link."""

    algorithm: str
    options: dict[str, Any]
    codec: str
    link: LinkProfile

    @property
    def label(self) -> str:
        parts, depth = overlap_options(self.options)
        return self.algorithm + (f" {parts} parts" if parts > 1 else "") + (f" stale {depth}" if depth else "")


@dataclass(frozen=True)
class ToTarget:
    """How one run (federated or in-process) reached the target, epoch by epoch."""

    seconds: float
    epochs: int
    reached: bool
    accuracy: float
    megabytes: float = 0.0


def to_target(points: list[tuple[float, float, float]]) -> ToTarget:
    """From (accuracy, seconds, MB) per epoch: the cumulative cost up to the first epoch at the target."""
    seconds = megabytes = 0.0
    for epoch, (accuracy, epoch_s, epoch_mb) in enumerate(points, start=1):
        seconds, megabytes = seconds + epoch_s, megabytes + epoch_mb
        if accuracy >= TARGET_ACCURACY:
            return ToTarget(seconds, epoch, True, accuracy, megabytes)
    return ToTarget(seconds, len(points), False, points[-1][0], megabytes)


def reference_times(data: Path, epochs: int) -> dict[str, ToTarget]:
    """Each in-process reference's time to the target (the cumulative seconds ``curve`` prints)."""
    out = {}
    for name in sorted({reference for _, reference in ALGORITHMS.values()}):
        options = ALGORITHMS[name][0]
        points = curve(name, options, data, epochs)  # cumulative seconds: per epoch, the differences
        starts = [0.0] + [seconds for _, seconds in points[:-1]]
        out[name] = to_target(
            [(accuracy, end - start, 0.0) for (accuracy, end), start in zip(points, starts, strict=True)]
        )
    return out


def run_config(root: Path, certs: Path, data: Path, config: Config, epochs: int) -> ToTarget:
    """One federated job over ``config.link``; its cost to the target."""
    job = replace(
        JOB,
        job_id="-".join(
            ["wan", config.algorithm, config.codec, *(f"{k}{v}" for k, v in sorted(config.options.items()))]
        ),
        algorithm=config.algorithm,
        algorithm_options=config.options,
        wire_codec=config.codec,
        epochs=epochs,
    )
    job_root = root / f"{job.job_id}-{config.link.rtt_ms:g}ms-{epochs}"
    job_root.mkdir()
    write_configs(job_root, job, certs=certs, data=data, top_hidden=TOP_HIDDEN, torch_threads=TORCH_THREADS)
    with contextlib.ExitStack() as links:

        def dial(party: int, port: int) -> str:
            return links.enter_context(WanProxy(("127.0.0.1", port), config.link, seed=party)).address

        summary = run_federated(job_root, job, torch_threads=TORCH_THREADS, timeout_s=TIMEOUT_S, dial=dial)
    return to_target(
        [(e["metrics"]["accuracy"], float(e["seconds"]), float(e.get("wire_mb", 0.0))) for e in summary["epochs"]]
    )


def configs(links: list[LinkProfile], algorithms: list[str], codecs: list[str]) -> list[Config]:
    out = []
    for link in links:
        for name in algorithms:
            options = ALGORITHMS[name][0]
            variants = [options] + [{**options, **extra} for extra in OVERLAP.get(name, [])]
            out += [Config(name, variant, codec, link) for variant in variants for codec in codecs]
    return out


def _steps_per_epoch(job: JobSpec) -> int:
    train = round(ROWS * (1 - job.test_fraction))
    return -(-train // job.batch_size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--links", default="0,1", help="which of vfltesting.wan.LINKS, by index")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--codecs", default=",".join(CODECS))
    parser.add_argument("--epochs", type=int, default=1, help=f"epochs per job (a miss runs again with {RETRY_EPOCHS})")
    args = parser.parse_args()
    links = [LINKS[int(i)] for i in args.links.split(",")]
    algorithms, codecs = args.algorithms.split(","), args.codecs.split(",")
    prepare_compute(TORCH_THREADS)
    steps = _steps_per_epoch(JOB)
    print("== training over an emulated WAN: time, bytes and rounds to a fixed accuracy ==")
    print(
        f"   {ROWS} rows, features {'/'.join(map(str, FEATURES_PER_PARTY))}, batch {JOB.batch_size}, embedding "
        f"{JOB.embedding_dim}, {steps} rounds per epoch; target: held-out accuracy >= {TARGET_ACCURACY}, "
        f"checked after each epoch (a job of {args.epochs} epoch(s), again with {RETRY_EPOCHS} if it misses); "
        "1 server + 2 clients as processes over mTLS, each client through its own link",
        flush=True,
    )
    print(versions_line("torch", "numpy", "grpcio"), flush=True)
    rows: list[tuple[Config, ToTarget]] = []
    with tempfile.TemporaryDirectory(prefix="vfl-bench-") as tmp:
        root = Path(tmp)
        issue_pki(root / "certs", JOB.passive_parties)
        write_synthetic_split(root / "data", rows=ROWS, features_per_party=FEATURES_PER_PARTY, seed=0)
        before = reference_times(root / "data", args.epochs)
        for config in configs(links, algorithms, codecs):
            try:
                run = functools.partial(run_config, root, root / "certs", root / "data", config, args.epochs)
                result, window = measured(run, own_children=True)
                if not result.reached and args.epochs < RETRY_EPOCHS:
                    run = functools.partial(run_config, root, root / "certs", root / "data", config, RETRY_EPOCHS)
                    result, window = measured(run, own_children=True)
            except RuntimeError as exc:
                print(f"bench failed: {config}: {exc}", file=sys.stderr)
                return 1
            rows.append((config, result))
            steal = "n/a" if window.steal is None else f"{window.steal:.2f}"
            print(
                f"   {config.label} {config.codec} over {config.link}: accuracy {result.accuracy:.4f} after "
                f"{result.epochs} epoch(s), {result.seconds:.2f} s, {result.megabytes:.1f} MB; steal {steal} CPUs",
                flush=True,
            )
        after = reference_times(root / "data", args.epochs)
    reference = {name: min(before[name], after[name], key=lambda r: r.seconds) for name in before}

    print("\nin-process references (the faster of the runs before and after the federated jobs):")
    for name, r in reference.items():
        print(
            f"   {name:<8} {'reached' if r.reached else 'NOT reached'} {r.accuracy:.4f} in {r.epochs} epoch(s): "
            f"{r.seconds:.2f} s (before {before[name].seconds:.2f} s, after {after[name].seconds:.2f} s)"
        )
    print(f"\n{'link':<24} {'algorithm':<18} {'codec':<6} {'time s':>8} {'MB':>8} ", end="")
    print(f"{'rounds':>7} {'accuracy':>9} {'ratio':>7}")

    def ratio(config: Config, result: ToTarget) -> float:
        return result.seconds / reference[ALGORITHMS[config.algorithm][1]].seconds

    for config, result in rows:
        mark = "" if result.reached else "  (target not reached)"
        print(
            f"{config.link!s:<24} {config.label:<18} {config.codec:<6} {result.seconds:8.2f} "
            f"{result.megabytes:8.1f} {result.epochs * steps:7d} {result.accuracy:9.4f} "
            f"{ratio(config, result):7.2f}{mark}"
        )
    first = [(c, r) for c, r in rows if c.link == LINKS[0] and r.reached]
    if not first:
        print("no configuration reached the target on the first link", file=sys.stderr)
        print(f"BENCH wan_best_vs_inprocess inf x target <= {TARGET_RATIO} MISSED")
        return 0
    best_config, best = min(first, key=lambda row: row[1].seconds)
    fastest = min((r for r in reference.values() if r.reached), key=lambda r: r.seconds)
    print(
        f"\nfastest on {LINKS[0]}: {best_config.label} {best_config.codec}, {best.seconds:.2f} s to {TARGET_ACCURACY}; "
        f"against the fastest in-process reference of any algorithm ({fastest.seconds:.2f} s): "
        f"{best.seconds / fastest.seconds:.2f} x"
    )
    lowest = min(first, key=lambda row: ratio(*row))
    print(
        f"lowest ratio on {LINKS[0]}: {lowest[0].label} {lowest[0].codec}, {ratio(*lowest):.2f} x its own in-process "
        f"time ({lowest[1].seconds:.2f} s to {TARGET_ACCURACY}); not the BENCH figure, which is the fastest "
        "configuration's: an algorithm that computes slowly in process gets a low ratio without being fast"
    )
    plain = [r for c, r in first if c.algorithm == "splitnn" and c.codec == "fp32" and not c.options]
    if plain:
        print(
            f"SplitNN fp32 on {LINKS[0]}: {plain[0].seconds / reference['splitnn'].seconds:.2f} x its in-process time"
        )
    x = ratio(best_config, best)
    print(f"BENCH wan_best_vs_inprocess {x:.2f} x target <= {TARGET_RATIO} {'MET' if x <= TARGET_RATIO else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
