"""PSI primitives: cost per operation of hashing IDs to Curve25519 and blinding them with X25519.

What is measured (medians over ``--repeats`` runs; the machine may be shared, so the minimum is
printed too):

- ``encode_to_u``: one call per ID, and ``encode_many`` (the batch path the blinder uses);
- ``blind``: X25519 through ``cryptography`` (OpenSSL), and through libsodium (PyNaCl's
  ``crypto_scalarmult``) when PyNaCl is installed, as the alternative backend;
- ``hash_and_blind`` in this process;
- ``ParallelBlinder`` start-up (forkserver and spawn) and its throughput with 1 and 2 workers on
  ``--ids`` IDs (200,000 by default), for ``hash_and_blind`` and for ``blind``;
- with ``--million``, one real 1M-ID ``hash_and_blind`` on all cores, with the peak RSS of the
  parent and of the largest worker.

Then the projection for a 1M × 1M two-party ECDH-PSI: each party hashes and blinds its 1M IDs,
then blinds the peer's 1M points. Assumptions: the two parties run at the same time on this one
2-core box (so four jobs share two cores), the pool scales as measured with 2 workers, and
network transfer, matching and start-up are left out (they are small next to 4M X25519
multiplications). The figure for one party per 2-core box is printed as well.

Run: ``.venv/bin/python -m bench.psi.primitives [--ids N] [--repeats R] [--million]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable

from vflcore.psi import BlindingKey, ParallelBlinder, blind, encode_many, encode_to_u, hash_and_blind, make_dst

Timed = tuple[float, float]  # (median, min) seconds


def timed(run: Callable[[], object], repeats: int) -> Timed:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def per_op(name: str, result: Timed, n: int) -> float:
    median, best = result
    print(f"  {name:44s} {median / n * 1e6:8.2f} µs/op   (min {best / n * 1e6:6.2f})")
    return median / n


def rate(name: str, result: Timed, n: int) -> float:
    median, best = result
    print(f"  {name:44s} {n / median:10,.0f} IDs/s  (best {n / best:,.0f}; {median:.2f} s per {n:,})")
    return median / n


def primitives(repeats: int) -> dict[str, float]:
    n = 20_000
    dst = make_dst("bench-psi")
    ids = [f"customer-{i:09d}".encode() for i in range(n)]
    key = BlindingKey.generate()
    points = encode_many(ids, dst)
    print(f"Primitives, single core, {n:,} items, median of {repeats}:")
    out = {
        "encode_to_u": per_op(
            "encode_to_u (one call per ID)", timed(lambda: [encode_to_u(i, dst) for i in ids], repeats), n
        ),
        "encode_many": per_op("encode_many (gmpy2, batched)", timed(lambda: encode_many(ids, dst), repeats), n),
        "blind": per_op("blind, cryptography (OpenSSL X25519)", timed(lambda: blind(points, key), repeats), n),
    }
    try:
        from nacl.bindings import crypto_scalarmult
    except ImportError:
        print("  blind, libsodium (PyNaCl)                    not installed")
    else:
        raw = key._raw()
        assert [crypto_scalarmult(raw, u) for u in points[:100]] == blind(points[:100], key)
        out["blind_sodium"] = per_op(
            "blind, libsodium (PyNaCl crypto_scalarmult)",
            timed(lambda: [crypto_scalarmult(raw, u) for u in points], repeats),
            n,
        )
    out["hash_and_blind"] = per_op("hash_and_blind, serial", timed(lambda: hash_and_blind(ids, dst, key), repeats), n)
    return out


def startup(repeats: int) -> None:
    print(f"ParallelBlinder start-up, 2 workers (open() returns once every worker holds the key), median of {repeats}:")
    key = BlindingKey.generate()
    for method in ("forkserver", "spawn"):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            with ParallelBlinder(key, workers=2, start_method=method):
                samples.append(time.perf_counter() - start)
        print(f"  {method:44s} {statistics.median(samples) * 1e3:8.0f} ms      (min {min(samples) * 1e3:.0f})")


def pool_rates(n: int, repeats: int) -> dict[int, tuple[float, float]]:
    dst = make_dst("bench-psi")
    ids = [f"customer-{i:09d}".encode() for i in range(n)]
    key = BlindingKey.generate()
    points = encode_many(ids, dst)
    print(f"ParallelBlinder on {n:,} IDs (forkserver, chunks of 16,384), median of {repeats}:")
    out = {}
    for workers in (1, 2):
        with ParallelBlinder(key, workers=workers) as pool:
            hb = rate(f"hash_and_blind, {workers} worker(s)", timed(lambda: pool.hash_and_blind(ids, dst), repeats), n)
            bl = rate(f"blind, {workers} worker(s)", timed(lambda: pool.blind(points), repeats), n)
        out[workers] = (hb, bl)
    return out


def worker_peak_rss_mib(pool: ParallelBlinder) -> float:
    """Largest VmHWM (peak RSS) among the pool's workers, from /proc (Linux); 0 if unknown.

    The workers are children of the forkserver, not of this process, so RUSAGE_CHILDREN misses them.
    """
    executor = pool._pool
    processes = getattr(executor, "_processes", None) or {}
    peak = 0.0
    for pid in processes:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            continue
    return peak


def million() -> None:
    n = 1_000_000
    ids = [f"customer-{i:09d}".encode() for i in range(n)]
    key = BlindingKey.generate()
    start = time.perf_counter()
    with ParallelBlinder(key) as pool:
        out = pool.hash_and_blind(ids, make_dst("bench-psi"))
        worker = worker_peak_rss_mib(pool)
    wall = time.perf_counter() - start
    assert len(out) == n
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"1M IDs, hash_and_blind on {pool.workers} workers: {wall:.1f} s wall including start-up")
    print(f"  peak RSS: parent {parent:.0f} MiB (1M IDs in, 1M results out), largest worker {worker:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ids", type=int, default=200_000, help="IDs for the ParallelBlinder runs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--million", action="store_true", help="also hash and blind 1M IDs, with peak RSS")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")

    single = primitives(args.repeats)
    if "blind_sodium" in single:
        gain = single["blind"] / single["blind_sodium"] - 1
        verdict = "faster" if gain > 0 else "slower"
        print(f"  -> libsodium is {abs(gain):.0%} {verdict} than OpenSSL; a new dependency needs > 15 % faster")
    startup(args.repeats)
    pools = pool_rates(args.ids, max(3, args.repeats // 2))

    one_hb, one_bl = pools[1]
    two_hb, two_bl = pools[2]
    print(f"  -> speed-up with 2 workers: hash_and_blind {one_hb / two_hb:.2f}x, blind {one_bl / two_bl:.2f}x")
    per_id_cpu = one_hb + one_bl  # one worker's seconds per ID: hash+blind own, blind the peer's
    two_party_shared = 2 * 1_000_000 * per_id_cpu / 2  # both parties' work, spread over 2 cores
    own_box = 1_000_000 * (two_hb + two_bl)  # one party alone with its 2 workers
    print("Projection, 1M x 1M two-party ECDH-PSI (each party: 1M hash_and_blind + 1M blind):")
    print(f"  per party CPU: {1e6 * per_id_cpu:.0f} s ({per_id_cpu * 1e6:.1f} µs per ID)")
    print(f"  both parties at once on this 2-core box: {two_party_shared:.0f} s wall")
    print(f"  each party on its own 2-core box:        {own_box:.0f} s wall")
    if args.million:
        million()


if __name__ == "__main__":
    main()
