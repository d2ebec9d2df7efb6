"""openmined.psi on the same ID sets, for comparison: in its own virtualenv, and bounded in time.

It gets its own venv (``/tmp/ompsi-venv``) because it pins protobuf==6.30.2, which this project's
environment must not take. A 50k × 50k calibration run projects the n × n time; above the budget
it runs on fewer IDs and is scaled linearly, and says so, so the bench never waits on it for long.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common.machine import children_cpu_seconds
from bench.psi.inputs import PARTY
from bench.psi.monitor import busy_cpu_seconds
from bench.psi.report import mib

OMPSI_VENV = Path("/tmp/ompsi-venv")
OMPSI_CALIBRATION_IDS = 50_000
RUNNER = Path(__file__).with_name("openmined.py")  # run by path: that venv does not have this project


def ensure_ompsi() -> tuple[Path | None, str]:
    """The openmined.psi venv's python, creating it if needed; (None, why) if it cannot be had."""
    python = OMPSI_VENV / "bin" / "python"
    probe = [str(python), "-c", "import private_set_intersection.python as p; print(p.__version__)"]
    if python.exists() and subprocess.run(probe, capture_output=True, timeout=60).returncode == 0:
        return python, "existing venv"
    try:
        if not python.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", str(OMPSI_VENV)], check=True, capture_output=True, timeout=120
            )
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openmined.psi"],
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired:
        return None, "creating the venv or `pip install openmined.psi` took too long (no network?)"
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"could not create {OMPSI_VENV}: {exc}"
    if done.returncode != 0:
        return None, f"`pip install openmined.psi` failed: {done.stderr.strip().splitlines()[-1:]}"
    if subprocess.run(probe, capture_output=True, timeout=60).returncode != 0:
        return None, "openmined.psi installed but does not import"
    return python, "installed now"


def run_ompsi(python: Path, root: Path, argv: list[str], timeout_s: float) -> dict[str, object]:
    """One run of ``openmined.py`` in the venv; its JSON line."""
    done = subprocess.run(
        [str(python), str(RUNNER), *argv], capture_output=True, text=True, timeout=timeout_s, cwd=root
    )
    if done.returncode != 0:
        raise RuntimeError(f"openmined.psi runner failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def time_openmined(python: Path, root: Path, data: Path, n: int, mode: str, budget_s: float) -> tuple[float, str]:
    """openmined.psi on the same sets, bounded: (seconds for n x n, how it was obtained)."""
    cal_n = min(OMPSI_CALIBRATION_IDS, n)
    print(f"\n== openmined.psi (venv {OMPSI_VENV}), server + client as 2 processes, pipes, GCS, fpr 1e-9 ==")
    cal = run_ompsi(python, root, ["--synthetic", str(cal_n)], timeout_s=300)
    cal_s = float(cal["wall_s"])  # type: ignore[arg-type]
    projected = cal_s * n / cal_n
    print(f"  calibration {cal_n:,} x {cal_n:,}: {cal_s:.1f} s -> projected {n:,} x {n:,}: {projected:.0f} s")
    if mode == "full" or projected <= budget_s:
        size, argv = n, [str(data / "party1.csv"), str(data / f"party{PARTY}.csv")]
    else:
        size = max(100_000, int(budget_s / projected * n) // 100_000 * 100_000)
        size = min(size, n)
        argv = ["--synthetic", str(size)] if size < n else [str(data / "party1.csv"), str(data / f"party{PARTY}.csv")]
    flush_start = time.perf_counter()
    sys.stdout.flush()
    busy0, children0 = busy_cpu_seconds(), children_cpu_seconds()
    got = run_ompsi(python, root, argv, timeout_s=max(2 * budget_s, 3 * projected * size / n) + 120)
    span = time.perf_counter() - flush_start
    wall = float(got["wall_s"])  # type: ignore[arg-type]
    server, client = got["server"], got["client"]
    assert isinstance(server, dict) and isinstance(client, dict)
    if client["intersection"] != size // 2:
        raise RuntimeError(f"openmined.psi found {client['intersection']} common IDs, expected {size // 2}")
    print(
        f"  {size:,} x {size:,} (openmined.psi {got['version']}): {wall:.1f} s wall, "
        f"intersection {client['intersection']:,}"
    )
    print(
        f"    server: setup (hash+encrypt own set, GCS) {server['setup_s']:.1f} s, waited {server['waited_s']:.1f} s, "
        f"ProcessRequest {server['process_request_s']:.1f} s; peak RSS {mib(int(server['maxrss_kib']))}; sends "
        f"{int(server['setup_bytes']) + int(server['response_bytes']):,} B"
    )
    print(
        f"    client: CreateRequest {client['request_s']:.1f} s, waited {client['waited_s']:.1f} s, GetIntersection "
        f"{client['get_intersection_s']:.1f} s; peak RSS {mib(int(client['maxrss_kib']))}; sends "
        f"{int(client['request_bytes']):,} B"
    )
    theirs_cpu = children_cpu_seconds() - children0  # the runner and its two processes, reaped
    others = max(0.0, (busy_cpu_seconds() - busy0 - theirs_cpu) / span)
    print(
        f"    CPU {theirs_cpu:.0f} s in all (incl. start-up and reading the two CSVs, 1-2 s); other processes "
        f"on the box used {others:.2f} of {os.cpu_count()} cores on average meanwhile"
    )
    if size == n:
        return wall, "measured"
    scaled = wall * n / size
    print(f"  -> scaled linearly to {n:,} x {n:,}: {scaled:.0f} s (ran {size:,} to stay within the budget)")
    return scaled, f"EXTRAPOLATED from {size:,} x {size:,}"


def compare_openmined(mode: str, budget_s: float, root: Path, data: Path, n: int) -> tuple[float | None, str]:
    """(openmined.psi seconds for n x n or None, a note for the summary); never raises for its failures.

    The comparison is optional context: a missing network, a failed install or a timeout is noted in
    the summary, and the bench's own figures and BENCH line still come out.
    """
    if mode == "skip":
        return None, "skipped (--openmined skip)"
    python, how = ensure_ompsi()
    if python is None:
        return None, f"skipped: {how}"
    try:
        return time_openmined(python, root, data, n, mode, budget_s)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return None, f"failed or timed out: {str(exc)[:300]}"
