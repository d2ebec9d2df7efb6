"""Sampling the two parties' process trees from /proc while a PSI runs: CPU, memory, socket bytes.

``os.wait4`` gives only the main process's peak RSS and its reaped children's CPU once it has
exited; the PSI workers' memory, the CPU timeline (which side idles while the other blinds), the
other load on a shared box and the bytes on the server's socket can only be seen while it runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_S = 0.2

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, CPU seconds of the process itself, not its children), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, own CPU seconds) for every process on the box."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                table[int(entry)] = stat
    return table


def _tree(root: int, table: dict[int, tuple[int, float]]) -> list[int]:
    """``root`` and its descendants: a party's PSI workers are children of its daemon."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            out.append(pid)
            todo.extend(children.get(pid, []))
    return out


def _memory_kib(pid: int, pss: bool) -> tuple[int, int, int]:
    """(VmRSS, VmHWM, Pss or 0) in KiB; zeros if the process is gone. Pss costs a page-table walk."""
    rss = hwm = pss_kib = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
        if pss:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        pss_kib = int(line.split()[1])
                        break
    except OSError:
        pass
    return rss, hwm, pss_kib


def busy_cpu_seconds() -> float:
    """Whole-machine busy CPU seconds so far: what other load on the box used is this minus ours."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def lo_tx_bytes() -> int | None:
    """Bytes sent on the loopback interface so far, or None where /proc/net/dev cannot be read."""
    try:
        for line in Path("/proc/net/dev").read_text().splitlines():
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[8])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _ss_bytes(port: int) -> dict[str, tuple[int, int]]:
    """Per connection to the server's port, seen from the server's socket: peer -> (sent, received)."""
    try:
        out = subprocess.run(
            ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    result: dict[str, tuple[int, int]] = {}
    peer = None
    for line in out.splitlines():
        if line and not line[0].isspace():
            parts = line.split()
            peer = parts[-1] if len(parts) >= 2 else None
            continue
        if peer is None:
            continue
        sent = re.search(r"bytes_sent:(\d+)", line)
        received = re.search(r"bytes_received:(\d+)", line)
        result[peer] = (int(sent.group(1)) if sent else 0, int(received.group(1)) if received else 0)
    return result


@dataclass
class PartyStats:
    name: str
    pid: int
    started: float  # monotonic
    exited: float | None = None
    exit_code: int | None = None
    wait4_maxrss_kib: int = 0
    wait4_cpu_s: float = 0.0
    peak_rss_sum_kib: int = 0
    peak_pss_sum_kib: int = 0
    main_hwm_kib: int = 0
    worker_hwm_kib: int = 0  # largest VmHWM among descendants
    max_processes: int = 0
    cpu_s: float = 0.0  # sampled CPU of the tree (last value)
    cpu_by_pid: dict[int, float] = field(default_factory=dict)


@dataclass
class Sample:
    t: float
    cpu: dict[str, float]  # party -> tree CPU seconds so far
    busy: float  # whole machine busy CPU seconds
    own: float  # this bench process's CPU seconds (the sampling itself), not counted as "others"


SCAN_EVERY = 5  # ticks between full /proc scans (new descendants), PSS reads and `ss` calls: 1 s


class Monitor:
    """Samples both parties' process trees every SAMPLE_S: memory, CPU, socket bytes.

    RSS and CPU of known processes every tick; a full /proc scan for new descendants, PSS and the
    socket counters every SCAN_EVERY ticks, to keep the sampler's own CPU small (it is printed).
    """

    def __init__(self) -> None:
        self.parties: dict[str, PartyStats] = {}
        self.known: dict[str, list[int]] = {}
        self.samples: list[Sample] = []
        self.socket_bytes: dict[str, tuple[int, int]] = {}
        self.port: int | None = None
        self._ticks = 0

    def add(self, name: str, pid: int) -> None:
        self.parties[name] = PartyStats(name, pid, time.monotonic())
        self.known[name] = [pid]

    def sample(self) -> None:
        full = self._ticks % SCAN_EVERY == 0
        table = _proc_table() if full else None
        cpu: dict[str, float] = {}
        for name, stats in self.parties.items():
            if stats.exited is None:
                if table is not None:
                    self.known[name] = _tree(stats.pid, table) or self.known[name]
                rss_sum = pss_sum = alive = 0
                for pid in self.known[name]:
                    stat = table.get(pid) if table is not None else _stat(pid)
                    if stat is None:
                        continue
                    alive += 1
                    rss, hwm, pss = _memory_kib(pid, pss=full)
                    rss_sum += rss
                    pss_sum += pss
                    if pid == stats.pid:
                        stats.main_hwm_kib = max(stats.main_hwm_kib, hwm)
                    else:
                        stats.worker_hwm_kib = max(stats.worker_hwm_kib, hwm)
                    stats.cpu_by_pid[pid] = stat[1]
                stats.peak_rss_sum_kib = max(stats.peak_rss_sum_kib, rss_sum)
                stats.peak_pss_sum_kib = max(stats.peak_pss_sum_kib, pss_sum)
                stats.max_processes = max(stats.max_processes, alive)
                # Each process's own CPU; one that has exited keeps its last sampled value (its last
                # instants may be missed; a child's CPU is never counted twice through its parent).
                stats.cpu_s = sum(stats.cpu_by_pid.values())
            cpu[name] = stats.cpu_s
        self.samples.append(Sample(time.monotonic(), cpu, busy_cpu_seconds(), time.process_time()))
        if full and self.port is not None:
            for peer, (sent, received) in _ss_bytes(self.port).items():
                old = self.socket_bytes.get(peer, (0, 0))
                self.socket_bytes[peer] = (max(old[0], sent), max(old[1], received))
        self._ticks += 1
