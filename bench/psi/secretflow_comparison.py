"""SecretFlow's PSI (``spu.psi`` 0.9.5) on the same two ID CSVs as our run, side by side with ours.

It gets its own venv (``/tmp/spu-venv``, Python 3.11: spu 0.9.5 has wheels for 3.10-3.11 only)
because spu pins numpy<2 and jax<=0.4.34 (``import spu.psi`` imports the ``spu`` package, which
imports jax), which this project's environment must not take. The venv is made the first time it is
needed, from the downloaded wheel where it lies in ``/tmp/spu`` and from PyPI otherwise; when that
fails the bench says why and goes on without SecretFlow.

Each protocol runs as two OS processes over spu's own link (``bench/psi/secretflow.py``), one at a
time, on the CSVs our daemons read. SecretFlow ECDH on Curve25519 is the reference of the bench's last
line: ours (server-reported PSI seconds) over its wall seconds, both measured in this run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.common.machine import children_cpu_seconds
from bench.psi.inputs import PARTY
from bench.psi.monitor import busy_cpu_seconds
from bench.psi.report import mib
from bench.psi.run import PsiRun

SPU_VERSION = "0.9.5"
SPU_VENV = Path("/tmp/spu-venv")
SPU_WHEEL = Path("/tmp/spu/spu-0.9.5-cp311-none-manylinux_2_17_x86_64.whl")
SPU_REQUIREMENTS = ["numpy<2", "jax<=0.4.34", "jaxlib<=0.4.34"]
PYTHON_311 = Path("/root/.pyenv/versions/3.11.7/bin/python")
REFERENCE = "ecdh-25519"  # the protocol the BENCH line compares with
ELLIGATOR2_MAX_IDS = 1_000_000  # by default elligator2 runs only up to here
RUNNER = Path(__file__).with_name("secretflow.py")  # run by path: that venv does not have this project


@dataclass(frozen=True)
class SecretFlowParty:
    """One rank's figures: its process (``os.wait4``) and its ``psi_execute`` call."""

    rank: int
    process_wall_s: float
    psi_s: float
    cpu_s: float
    maxrss_kib: int
    intersection: int
    output_rows: int


@dataclass(frozen=True)
class SecretFlowRun:
    """One protocol's run; ``wall_s`` is first party into ``psi_execute`` -> last one out."""

    protocol: str
    version: str
    wall_s: float
    parties: tuple[SecretFlowParty, SecretFlowParty]
    others_cores: float = 0.0  # other processes on the box meanwhile, in cores


@dataclass(frozen=True)
class OurFigures:
    """Our run's figures for the table: PSI seconds, and CPU and peak RSS of (server, client)."""

    psi_s: float
    cpu_s: tuple[float, float]
    rss_kib: tuple[int, int]

    @classmethod
    def of(cls, run: PsiRun) -> OurFigures:
        server, client = run.parties["server"], run.parties["client"]
        return cls(run.aligned_s, (server.cpu_s, client.cpu_s), (server.peak_rss_sum_kib, client.peak_rss_sum_kib))


@dataclass
class SecretFlowResults:
    """The protocols that ran, why others did not, and why there is no reference figure if there is none."""

    runs: dict[str, SecretFlowRun]
    failures: dict[str, str]
    note: str = ""

    @property
    def reference_s(self) -> float | None:
        run = self.runs.get(REFERENCE)
        return run.wall_s if run is not None else None

    @property
    def why_no_reference(self) -> str:
        if self.note:
            return self.note
        if REFERENCE in self.failures:
            return f"SecretFlow {REFERENCE} failed: {self.failures[REFERENCE]}"
        return f"SecretFlow {REFERENCE} was not among --secretflow-protocols"


def default_protocols(n: int) -> list[str]:
    """ECDH on Curve25519 (the reference), with Elligator2 up to 1M IDs, on FourQ, and RR22."""
    elligator2 = ["ecdh-25519-elligator2"] if n <= ELLIGATOR2_MAX_IDS else []
    return [REFERENCE, *elligator2, "ecdh-fourq", "rr22"]


def parse_runner_output(stdout: str, expected: int) -> SecretFlowRun:
    """The runner's last JSON line as figures; RuntimeError unless both parties found ``expected`` IDs."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the SecretFlow runner printed no result: {stdout[-500:]!r}")
    got = json.loads(lines[-1])
    parties = tuple(
        SecretFlowParty(
            rank=int(p["rank"]),
            process_wall_s=float(p["process_wall_s"]),
            psi_s=float(p["psi_s"]),
            cpu_s=float(p["cpu_s"]),
            maxrss_kib=int(p["maxrss_kib"]),
            intersection=int(p["intersection"]),
            output_rows=int(p["output_rows"]),
        )
        for p in got["parties"]
    )
    if len(parties) != 2:
        raise RuntimeError(f"the SecretFlow runner reported {len(parties)} parties, not 2")
    for p in parties:
        if p.intersection != expected or p.output_rows != expected:
            raise RuntimeError(
                f"SecretFlow {got['protocol']} rank {p.rank}: intersection {p.intersection:,}, "
                f"{p.output_rows:,} rows written, expected {expected:,}"
            )
    return SecretFlowRun(str(got["protocol"]), str(got["version"]), float(got["wall_s"]), (parties[0], parties[1]))


def _base_python() -> Path | None:
    """A Python 3.11 to make the venv from: spu 0.9.5's wheels are for 3.10 and 3.11."""
    if PYTHON_311.exists():
        return PYTHON_311
    return Path(sys.executable) if sys.version_info[:2] == (3, 11) else None


def ensure_spu() -> tuple[Path | None, str]:
    """The spu venv's python, creating it if needed; (None, why) if it cannot be had."""
    python = SPU_VENV / "bin" / "python"
    probe = [str(python), "-c", "import spu, spu.psi, spu.libspu.link; print(spu.__version__)"]

    def imports() -> bool:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=120)
        return done.returncode == 0 and done.stdout.strip() == SPU_VERSION

    if python.exists() and imports():
        return python, "existing venv"
    base = _base_python()
    if base is None:
        return None, f"no Python 3.11 to make {SPU_VENV} from (spu {SPU_VERSION} has no wheel for {sys.version[:4]})"
    spu = str(SPU_WHEEL) if SPU_WHEEL.exists() else f"spu=={SPU_VERSION}"
    print(f"  creating {SPU_VENV} with {base} and installing {spu} (a few minutes)", flush=True)
    try:
        if not python.exists():
            subprocess.run([str(base), "-m", "venv", str(SPU_VENV)], check=True, capture_output=True, timeout=120)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spu, *SPU_REQUIREMENTS],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except subprocess.TimeoutExpired:
        return None, f"creating the venv or `pip install {spu}` took too long (no network?)"
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"could not create {SPU_VENV}: {exc}"
    if done.returncode != 0:
        return None, f"`pip install {spu}` failed: {done.stderr.strip().splitlines()[-1:]}"
    if not imports():
        return None, f"spu installed in {SPU_VENV} but `import spu.psi` fails or is not {SPU_VERSION}"
    return python, "installed now"


def timeout_for(n: int) -> float:
    """Seconds one protocol may take for n IDs a party before its parties are killed."""
    return 120.0 + 900.0 * n / 1_000_000


def run_protocol(
    python: Path, root: Path, data: Path, n: int, protocol: str, expected: int | None = None
) -> SecretFlowRun:
    """One protocol on the bench's two CSVs (our server's as rank 0, our client's as rank 1).

    ``expected``: the intersection size the CSVs hold (None: half of ``n``, as ``make bench-psi``'s).
    """
    workdir = root / "secretflow" / protocol
    csvs = [str(data / "party1.csv"), str(data / f"party{PARTY}.csv")]
    timeout_s = timeout_for(n)
    busy0, children0, t0 = busy_cpu_seconds(), children_cpu_seconds(), os.times().elapsed
    done = subprocess.run(
        [str(python), str(RUNNER), "run", protocol, *csvs, str(workdir), str(timeout_s)],
        capture_output=True,
        text=True,
        timeout=timeout_s + 60,
    )
    span = os.times().elapsed - t0
    if done.returncode != 0:
        raise RuntimeError(f"runner exited {done.returncode}: {done.stderr.strip()[-600:]}")
    run = parse_runner_output(done.stdout, n // 2 if expected is None else expected)
    others = max(0.0, (busy_cpu_seconds() - busy0 - (children_cpu_seconds() - children0)) / span) if span else 0.0
    return SecretFlowRun(run.protocol, run.version, run.wall_s, run.parties, others)


def print_run(run: SecretFlowRun) -> None:
    """Each rank's figures as they come, so a long bench shows progress."""
    print(
        f"  {run.protocol}: {run.wall_s:.1f} s (psi_execute, first in -> last out), intersection "
        f"{run.parties[0].intersection:,}; others used {run.others_cores:.2f} cores meanwhile"
    )
    for p in run.parties:
        print(
            f"    rank {p.rank}: psi_execute {p.psi_s:.1f} s, process {p.process_wall_s:.1f} s, CPU {p.cpu_s:.1f} s, "
            f"peak RSS {mib(p.maxrss_kib)}"
        )


def compare_secretflow(
    mode: str, protocols: list[str], root: Path, data: Path, n: int, expected: int | None = None
) -> SecretFlowResults:
    """SecretFlow's figures for ``protocols`` on the bench's CSVs; never raises for its failures.

    The comparison is context: a failed install, a failed or timed-out protocol is noted, and the
    bench's own figures and BENCH lines still come out.
    """
    if mode == "skip":
        return SecretFlowResults({}, {}, "SecretFlow skipped (--secretflow skip)")
    print(f"\n== SecretFlow spu {SPU_VERSION} PSI (venv {SPU_VENV}), rank 0 + rank 1 as 2 processes, brpc link ==")
    try:
        python, how = ensure_spu()
    except (OSError, subprocess.SubprocessError) as exc:  # e.g. the import probe of a broken venv hanging
        python, how = None, f"checking {SPU_VENV} failed: {exc}"
    if python is None:
        print(f"  SecretFlow unavailable: {how}")
        return SecretFlowResults({}, {}, f"SecretFlow unavailable: {how}")
    print(f"  spu venv: {how}; receiver rank 0, result broadcast, output aligned, keys_unique", flush=True)
    results = SecretFlowResults({}, {})
    for protocol in protocols:
        try:
            run = run_protocol(python, root, data, n, protocol, expected)
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as exc:
            results.failures[protocol] = str(exc)[:400]
            print(f"  {protocol}: FAILED {str(exc)[:400]}", flush=True)
            continue
        results.runs[protocol] = run
        print_run(run)
        sys.stdout.flush()
    return results


def side_by_side(n: int, ours: OurFigures, results: SecretFlowResults) -> list[str]:
    """The table: our PSI and each SecretFlow protocol, PSI seconds, CPU and peak RSS per party."""
    head = f"  {'':<34}{'PSI s':>8}{'ours/it':>9}{'CPU s P1':>10}{'CPU s P2':>10}{'RSS P1':>11}{'RSS P2':>11}"
    lines = [
        f"\n== side by side, {n:,} x {n:,}, the same two CSVs (P1 = our server / rank 0, P2 = client / rank 1) ==",
        head,
    ]

    def row(name: str, psi_s: float, cpu: tuple[float, float], rss: tuple[int, int]) -> str:
        ratio = ours.psi_s / psi_s if psi_s > 0 else math.nan
        return f"  {name:<34}{psi_s:>8.1f}{ratio:>9.2f}{cpu[0]:>10.1f}{cpu[1]:>10.1f}{mib(rss[0]):>11}{mib(rss[1]):>11}"

    lines.append(row("ours (ECDH X25519)", ours.psi_s, ours.cpu_s, ours.rss_kib))
    for protocol, run in results.runs.items():
        p0, p1 = run.parties
        lines.append(row(f"SecretFlow {protocol}", run.wall_s, (p0.cpu_s, p1.cpu_s), (p0.maxrss_kib, p1.maxrss_kib)))
    for protocol, why in results.failures.items():
        lines.append(f"  SecretFlow {protocol}: failed ({why.splitlines()[0][:150]})")
    if results.note:
        lines.append(f"  {results.note}")
    lines += [
        "  ours/it = our PSI s / that row's PSI s (below 1: ours is faster)",
        "  ours: PSI s = server-reported 'aligned ... in X s' (after both joined; no start-up, no CSV reading); CPU =",
        "        each party's process tree over its whole life (sampled); RSS = peak of the tree's summed RSS",
        "  SecretFlow: PSI s = first rank into psi_execute -> last out (includes reading both CSVs, aligning and",
        "        writing the output); CPU = os.wait4 of each rank's process over its whole life (Python start-up and",
        "        spu/jax imports included); RSS = its ru_maxrss (one process; ~230 MiB of it is spu's libraries)",
    ]
    return lines
