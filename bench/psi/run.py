"""One PSI run: ``vfl-server --psi-only`` and ``vfl-client`` started as OS processes over mTLS.

The deployment shape, not an in-process call: each party is its own process tree on 127.0.0.1,
started from the installed console scripts, so the measured time includes what a real deployment
pays (TLS, gRPC, its own interpreter and PSI workers). The server's ``aligned ... in X s`` is the
headline figure; the run also checks the intersection both parties wrote.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.psi.inputs import PARTY, IdSets
from bench.psi.monitor import SAMPLE_S, Monitor, PartyStats, Sample, lo_tx_bytes
from vfltesting.localrun import wait_for_port

BIN = Path(sys.executable).parent
PSI_TIMEOUT_S = 1800.0
SERVER_CMD = [str(BIN / "vfl-server")]  # a profiling wrapper may replace these
CLIENT_CMD = [str(BIN / "vfl-client")]


@dataclass
class PsiRun:
    workers: int
    job_id: str
    aligned_s: float  # server-reported
    wall_s: float  # server start -> both exited
    client_wall_s: float
    intersection: int
    parties: dict[str, PartyStats]
    samples: list[Sample]
    socket_bytes: dict[str, tuple[int, int]]
    lo_bytes: int | None
    events: list[tuple[float, str, str]]  # (seconds since server start, party, event + details)
    t0_mono: float


def write_configs(
    root: Path,
    workers: int,
    *,
    chunk_ids: int | None = None,
    join_timeout_s: float = 300.0,
    ray_addresses: dict[str, str] | None = None,
    x25519: str = "auto",
) -> None:
    """Both parties get the same ``[psi] workers`` and ``x25519``: the settings being measured; the
    server the chunk size.

    ``ray_addresses`` (``"server"``/``"client"`` -> a Ray cluster's address): that party's
    ``[compute] engine = "ray"``, on its own cluster.
    """
    chunking = "" if chunk_ids is None else f"chunk_ids = {chunk_ids}\n"
    compute = {
        name: f'\n[compute]\nengine = "ray"\nray_address = "{address}"\n'
        for name, address in (ray_addresses or {}).items()
    }
    (root / "server.toml").write_text(
        f"[server]\njoin_timeout_s = {join_timeout_s}\n\n[job]\npassive_parties = [{PARTY}]\n\n"
        f'[psi]\nworkers = {workers}\nx25519 = "{x25519}"\n{chunking}{compute.get("server", "")}'
    )
    (root / f"party{PARTY}.toml").write_text(
        f'[psi]\nworkers = {workers}\nx25519 = "{x25519}"\n{compute.get("client", "")}'
    )


def _reap(proc: subprocess.Popen[bytes], stats: PartyStats) -> bool:
    """os.wait4 without blocking; True once the process has exited (rusage recorded)."""
    if stats.exited is not None:
        return True
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid == 0:
        return False
    stats.exited = time.monotonic()
    stats.exit_code = os.waitstatus_to_exitcode(status)
    stats.wait4_maxrss_kib = usage.ru_maxrss
    stats.wait4_cpu_s = usage.ru_utime + usage.ru_stime
    proc.returncode = stats.exit_code  # reaped here: keep Popen from waiting again
    return True


def _events(path: Path, party: str, t0_wall: float) -> list[tuple[float, str, str]]:
    """A JSON log's events as (seconds since the server started, party, event + short details).

    Heartbeats are left out; the server's ``party_joined`` and ``aligned`` events bound the PSI
    window the report computes.
    """
    out = []
    skip = {"heartbeat", "heartbeat_sent", "heartbeat_received"}
    for line in path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
            when = dt.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        name = str(event.get("event", ""))
        if name in skip:
            continue
        details = {
            k: v
            for k, v in event.items()
            if k not in ("event", "timestamp", "level", "logger", "party", "job", "round") and len(str(v)) < 80
        }
        out.append((when - t0_wall, party, name + ("  " + json.dumps(details) if details else "")))
    return out


def _aligned_file(run_dir: Path, party: int) -> Path:
    files = sorted(run_dir.glob(f"*/party-{party}/aligned_ids.csv"))
    if not files:
        raise RuntimeError(f"no aligned_ids.csv for party {party} under {run_dir}")
    return files[0]


def _matches_expected(run_dir: Path, party: int, ids: IdSets) -> tuple[bool, int]:
    """(whether the party's file holds exactly the shared IDs in order, its line count), line by line."""
    expected = (ids.name(number) for number in ids.shared)  # zero-padded: numeric order is byte order
    lines = 0
    same = True
    with _aligned_file(run_dir, party).open(encoding="utf-8") as fh:
        next(fh, None)
        for line in fh:
            lines += 1
            if same and line.rstrip("\n") != next(expected, None):
                same = False
    return same and next(expected, None) is None, lines


def run_psi(
    root: Path,
    workers: int,
    n: int,
    certs: Path,
    data: Path,
    *,
    ids: IdSets | None = None,
    chunk_ids: int | None = None,
    timeout_s: float = PSI_TIMEOUT_S,
    ray_addresses: dict[str, str] | None = None,
    x25519: str = "auto",
) -> PsiRun:
    """One PSI between ``vfl-server --psi-only`` and ``vfl-client``, sampled throughout.

    The job id and run directory are fresh, so no saved alignment is reused. Raises RuntimeError,
    with both daemons' log tails on stderr, if either fails, the time runs out, or the intersection
    is not exactly the shared IDs in the agreed order on both sides. ``ids``: the ID sets of
    ``prepare_numbered_inputs`` (None: ``prepare_inputs``' half overlap); ``chunk_ids``: the
    server's ``[psi] chunk_ids`` (None: its default); ``ray_addresses``: the parties on the Ray
    engine, each on its own cluster (``write_configs``).
    """
    job_id = f"bench-psi-{int(time.time())}-{secrets.token_hex(3)}"
    run_dir = root / "runs" / job_id  # fresh: nothing saved to reuse
    logs = root / "logs" / job_id
    logs.mkdir(parents=True)
    write_configs(
        root,
        workers,
        chunk_ids=chunk_ids,
        join_timeout_s=max(300.0, timeout_s / 4),
        ray_addresses=ray_addresses,
        x25519=x25519,
    )
    port_file = run_dir / "port"
    common = ["--run-dir", str(run_dir), "--ca", str(certs / "ca.pem"), "--log-format", "json"]
    monitor = Monitor()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    lo_before = lo_tx_bytes()
    t0_wall, t0 = time.time(), time.monotonic()
    try:
        procs["server"] = subprocess.Popen(
            [
                *SERVER_CMD,
                "--psi-only",
                "--config",
                str(root / "server.toml"),
                "--listen",
                "127.0.0.1:0",
                "--port-file",
                str(port_file),
                "--data",
                str(data / "party1.csv"),
                "--cert",
                str(certs / "server.pem"),
                "--key",
                str(certs / "server.key"),
                "--job-id",
                job_id,
                *common,
            ],
            stdout=(logs / "server.out").open("wb"),
            stderr=(logs / "server.log").open("wb"),
        )
        monitor.add("server", procs["server"].pid)
        # The client is started only once the server listens; the monitor samples while it waits.
        start_s = max(300.0, timeout_s / 4)  # the server reads its CSV before it listens: 10M rows take a while
        server = procs["server"]
        port = wait_for_port(port_file, server, timeout_s=start_s, poll_s=SAMPLE_S, while_waiting=monitor.sample)
        monitor.port = port
        procs["client"] = subprocess.Popen(
            [
                *CLIENT_CMD,
                "--once",
                "--party",
                str(PARTY),
                "--config",
                str(root / f"party{PARTY}.toml"),
                "--server",
                f"127.0.0.1:{port}",
                "--data",
                str(data / f"party{PARTY}.csv"),
                "--cert",
                str(certs / f"party-{PARTY}.pem"),
                "--key",
                str(certs / f"party-{PARTY}.key"),
                *common,
            ],
            stdout=(logs / "client.out").open("wb"),
            stderr=(logs / "client.log").open("wb"),
        )
        monitor.add("client", procs["client"].pid)
        deadline = t0 + timeout_s
        while True:
            done = [_reap(procs[name], monitor.parties[name]) for name in procs]
            if all(done):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the PSI did not finish within {timeout_s:.0f} s")
            monitor.sample()
            time.sleep(SAMPLE_S)
    except BaseException:
        for name, proc in procs.items():
            stats = monitor.parties.get(name)
            if stats is not None and stats.exited is None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        _dump_logs(logs)
        raise
    wall = max(s.exited or 0.0 for s in monitor.parties.values()) - t0
    lo_after = lo_tx_bytes()
    codes = {name: stats.exit_code for name, stats in monitor.parties.items()}
    if any(codes.values()):
        _dump_logs(logs)
        raise RuntimeError(f"PSI failed: exit codes {codes}")
    out = (logs / "server.out").read_text(errors="replace")
    match = re.search(r"aligned (\d+) common IDs \((.*?)\) in ([\d.]+) s", out)
    if match is None:
        _dump_logs(logs)
        raise RuntimeError(f"the server did not print its 'aligned ... in X s' line; stdout:\n{out}")
    events = _events(logs / "server.log", "server", t0_wall) + _events(logs / "client.log", "client", t0_wall)
    events.sort()
    aligned_s = float(match.group(3))
    for _, party, text in events:  # the log has the figure with two decimals
        if party == "server" and text.startswith("aligned  "):
            aligned_s = float(json.loads(text.split("  ", 1)[1]).get("seconds", aligned_s))
    # The intersection must be exactly the shared IDs, in the agreed (sorted) order, on both sides.
    ids = ids or IdSets(n, n // 2)
    server_same, server_lines = _matches_expected(run_dir, 1, ids)
    client_same, client_lines = _matches_expected(run_dir, PARTY, ids)
    shared = ids.shared
    if int(match.group(1)) != len(shared) or not (server_same and client_same):
        raise RuntimeError(
            f"WRONG INTERSECTION: expected {len(shared)} IDs {ids.name(shared.start)}..{ids.name(shared.stop - 1)}; "
            f"server printed {match.group(1)}, server file has {server_lines}, client file has {client_lines} "
            f"(equal to expected: server {server_same}, client {client_same})"
        )
    client = monitor.parties["client"]
    return PsiRun(
        workers=workers,
        job_id=job_id,
        aligned_s=aligned_s,
        wall_s=wall,
        client_wall_s=(client.exited or 0.0) - client.started,
        intersection=server_lines,
        parties=monitor.parties,
        samples=monitor.samples,
        socket_bytes=monitor.socket_bytes,
        lo_bytes=None if lo_before is None or lo_after is None else lo_after - lo_before,
        events=events,
        t0_mono=t0,
    )


def _dump_logs(logs: Path) -> None:
    """Every daemon's output tail on stderr, so a failed run can be read without ``--keep``."""
    for path in sorted(logs.iterdir()):
        text = path.read_text(errors="replace")
        print(f"--- {path.name} (last 3000 chars):\n{text[-3000:]}", file=sys.stderr)
