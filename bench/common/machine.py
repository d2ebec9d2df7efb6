"""How busy the rest of the machine was while a bench phase ran: other processes and hypervisor steal.

This shared virtual machine's speed drifts by tens of percent within minutes, mostly from CPU
steal (time the hypervisor gave to other virtual machines). Benches wrap each timed phase in
``measured`` and print what it saw next to their numbers, so a reader can tell a slow run from
a noisy one. Linux only (``/proc/stat``); elsewhere the figures are None.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class Window:
    """Wall time and machine-wide CPU use over one phase of a bench."""

    wall_s: float
    others: float | None  # CPUs used by processes other than this one (and its children, if any)
    steal: float | None  # CPUs the hypervisor gave to other virtual machines
    busy: float | None = None  # CPUs busy machine-wide, this process and its children included


def cpu_counters() -> tuple[float, float] | None:
    """(busy, stolen) CPU seconds of the whole machine since boot, or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` has used (its threads included), or None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's reaped children (and the descendants they reaped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(run: Callable[[], _T], *, own_children: bool = False) -> tuple[_T, Window]:
    """Run a phase; also return how much of the machine others (and the hypervisor) took meanwhile.

    For an in-process phase, "others" is everything but this process: competition the measured
    code met. When the measured work runs in this process's children, ``own_children`` leaves
    "others" unknown and reports only the steal.
    """
    counters, own, wall = cpu_counters(), time.process_time(), time.perf_counter()
    result = run()
    counters_end, elapsed = cpu_counters(), time.perf_counter() - wall
    if counters is None or counters_end is None:
        return result, Window(elapsed, None, None)
    busy = counters_end[0] - counters[0]
    others = None if own_children else max(0.0, busy - (time.process_time() - own)) / elapsed
    return result, Window(elapsed, others, (counters_end[1] - counters[1]) / elapsed, busy / elapsed)
