"""Independent in-process training runs on a small process pool, printed as they finish.

The experiment benches (APFed, AdptVFedConv) train dozens of small models. Two spawned workers
use both cores; spawn, not fork, so that no worker inherits torch's thread pool.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

RunT = TypeVar("RunT")
ResultT = TypeVar("ResultT")

WORKERS = 2


def init_worker() -> None:
    """One torch thread per worker: two workers on two cores, no oversubscription."""
    import torch

    torch.set_num_threads(1)


def run_in_pool(
    runs: Sequence[RunT],
    execute: Callable[[RunT], ResultT],
    init_worker: Callable[[], None],
    describe: Callable[[ResultT], str],
    workers: int = WORKERS,
) -> list[ResultT]:
    """``execute`` every run on ``workers`` processes; print ``describe(result)`` as each one ends."""
    results: list[ResultT] = []
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=init_worker) as pool:
        futures = [pool.submit(execute, run) for run in runs]
        for done, future in enumerate(as_completed(futures), start=1):
            result = future.result()
            results.append(result)
            elapsed = time.perf_counter() - started
            print(f"[{done:3d}/{len(runs)}] {describe(result)} ({elapsed:.0f} s elapsed)", flush=True)
    return results
