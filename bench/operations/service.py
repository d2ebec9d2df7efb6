"""The long-running service under many jobs: 30 one-epoch SplitNN jobs on one server and two daemons.

``vfl-server`` and two ``vfl-client`` daemons start once, as OS processes over mTLS
(``vfltesting.service.ServiceRun``), and take part in job after job, as in production. The bench
submits each job through the Control API (``vflclient.JobClient``, operator "alice"), follows it to
its end, lets the daemons settle for ``SETTLE_S`` and then reads each daemon's ``/proc`` entry.

Why each figure matters:
- RSS after job 1 and after the last job, per daemon: a daemon that keeps per-job state (models,
  alignments, optimiser state, event histories) after the job has ended grows with every job, and
  a service that runs for months runs out of memory. Job 1 is the baseline because the first job
  loads torch and warms the allocator; growth after that is what each further job leaves behind.
- Threads and open file descriptors after job 1 and after the last job: each job opens gRPC
  channels, streams, thread pools and files; one that is not closed shows up here as a count that
  grows by a few per job. These must not grow at all.
- Submit-to-first-epoch latency (p50, p99): what an operator waits before a job shows progress,
  split into queue (submit -> "aligning"), join + PSI ("aligning" -> "training"; every job id
  gets a fresh alignment, so the PSI runs on every job) and the first epoch itself ("training" ->
  first epoch event, which includes the epoch's evaluation). The aim is a p50 of at most 1 s.
- Per-job wall time (submit until the watch stream ends), so the reader sees where time goes.
- Submit to the first training step (the server's ``first_step`` log event), job 1 against the
  median of the later jobs. The daemons are ready (every client has logged ``connected``) before
  job 1 is submitted, so job 1 pays only what a first job pays: the daemons warm torch up at
  start, and a first job that still costs much more than the next ones pays for something that
  the start-up should have paid. Target: job 1 <= 1.5x the later jobs' median.
- Stopping, after the jobs: an idle ``vfl-client`` (party 3, between jobs) from SIGTERM to its
  exit, target <= 1 s; then, with party 3 started again, ``vfl-server`` from SIGTERM to its exit
  while a job trains, target <= 3 s. That job must be ``interrupted`` in the job store with every
  epoch it finished recorded, which the bench checks ("nothing lost").

Event times are the server's ``time.time()``; the submit time is this process's ``time.time()``
just before ``submit``. Both run on this machine, so they share one clock.

The machine is shared: the bench prints its CPU count, the load average before and after, and the
CPU the hypervisor stole meanwhile. A job that does not finish is reported with the tail of every
daemon's log, the remaining jobs are skipped, and the target is MISSED.

Each target's verdict is a machine-readable ``BENCH <name> <value> <unit> target <op> <value>
MET|MISSED`` line: ``service_first_step_ratio``, ``service_client_stop_s``,
``service_server_stop_s``, and last, the headline, ``BENCH service_rss_growth <x> x target <= 1.10
MET|MISSED``, where ``x`` is the worst daemon's RSS after the last job divided by its RSS after
job 1. The exit code is 0 whether the targets are met or missed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.common.daemons import DAEMONS, wait_for_daemons
from bench.common.machine import Window, measured
from bench.common.versions import versions_line
from vflclient import JobClient, VflError
from vflserver.jobs.store import JobStore
from vfltesting.datasets import write_digits_split
from vfltesting.pki import issue_pki
from vfltesting.service import ServiceRun, event_time, job_document, log_events, wait_until

JOBS = 30
ALGORITHM = "splitnn"
#: Seconds to wait after a job ends before reading /proc: the daemons finish tearing the job down.
SETTLE_S = 1.0
TARGET_RSS_GROWTH = 1.10
AIM_LATENCY_P50_S = 1.0
TARGET_FIRST_STEP_RATIO = 1.5
TARGET_CLIENT_STOP_S = 1.0
TARGET_SERVER_STOP_S = 3.0
#: The job that trains while the server is stopped: long enough never to end first.
STOP_JOB = {"epochs": 50, "batch_size": 8}


@dataclass(frozen=True)
class DaemonSample:
    """One daemon's footprint, read from /proc after a job has ended and the daemon has settled."""

    rss_kib: int
    threads: int
    fds: int


@dataclass
class JobTiming:
    """When one job's milestones happened (Unix seconds, this machine's clock); None if they did not."""

    job_id: str
    submitted: float
    state: str = "unknown"
    message: str = ""
    #: The "training" event's message, "1437 common IDs (PSI)": whether the PSI ran or was reused.
    alignment: str = ""
    aligning: float | None = None
    training: float | None = None
    first_step: float | None = None  # the server's ``first_step`` log event
    first_epoch: float | None = None
    ended: float | None = None
    samples: dict[str, DaemonSample | None] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    def span(self, start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else end - start


# ---- measuring ----------------------------------------------------------------------------------


def sample_daemon(pid: int) -> DaemonSample | None:
    """RSS, thread count and open fds of process ``pid``; None if it has exited."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    return DaemonSample(rss_kib=int(status["VmRSS"].split()[0]), threads=int(status["Threads"]), fds=fds)


def run_job(jobs: JobClient, job_id: str) -> JobTiming:
    """Submit one one-epoch SplitNN job and follow its events to the end."""
    timing = JobTiming(job_id, submitted=time.time())
    jobs.submit(job_document(job_id, ALGORITHM, epochs=1))
    for event in jobs.watch(job_id):
        if event.kind == "epoch" and timing.first_epoch is None:
            timing.first_epoch = event.at
        elif event.kind == "state" and event.state == "aligning" and timing.aligning is None:
            timing.aligning = event.at
        elif event.kind == "state" and event.state == "training" and timing.training is None:
            timing.training = event.at
            timing.alignment = event.message
        timing.state, timing.message = event.state, event.message
    timing.ended = time.time()
    return timing


def run_jobs(run: ServiceRun, jobs: JobClient, timings: list[JobTiming]) -> None:
    """Run ``JOBS`` jobs back to back into ``timings``, sampling every daemon after each; stop at a failed one."""
    for index in range(1, JOBS + 1):
        timing = run_job(jobs, f"bench-{index:02d}")
        time.sleep(SETTLE_S)
        timing.samples = {name: sample_daemon(run.procs[name].pid) for name in DAEMONS}
        timings.append(timing)
        print(job_line(index, timing), flush=True)
        if not timing.finished:
            return


def add_first_steps(run: ServiceRun, timings: list[JobTiming]) -> None:
    """Each job's first training step, from the server's ``first_step`` log events."""
    firsts: dict[str, float] = {}
    for event in log_events(run.logs["server"], "first_step"):
        firsts.setdefault(str(event.get("job")), event_time(event))
    for timing in timings:
        timing.first_step = firsts.get(timing.job_id)


@dataclass
class Stops:
    """SIGTERM to exit: an idle client, then the server with a job running, and what the store kept."""

    client_s: float | None = None
    server_s: float | None = None
    #: The job that trained when the server was stopped, as the store has it afterwards.
    state: str = ""
    epochs_done: int = 0
    epochs_recorded: int = 0

    @property
    def nothing_lost(self) -> bool:
        return self.state == "interrupted" and self.epochs_done >= 1 and self.epochs_recorded == self.epochs_done


def sigterm(run: ServiceRun, name: str) -> float:
    """Seconds from SIGTERM to the exit of daemon ``name`` (which must exit 0)."""
    proc = run.procs[name]
    started = time.perf_counter()
    proc.terminate()
    code = proc.wait(timeout=120)
    seconds = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"{name} exited {code} on SIGTERM\n{run.tail()}")
    return seconds


def measure_stops(run: ServiceRun, jobs: JobClient, stops: Stops) -> None:
    """Stop an idle client, start it again, then stop the server while a job trains; read the store after."""
    stops.client_s = sigterm(run, "party-3")
    connected = len(log_events(run.logs["party-3"], "connected"))
    run.start_client(3)
    wait_until(lambda: len(log_events(run.logs["party-3"], "connected")) > connected, "party 3 to reconnect", run)
    job_id = "bench-stop"
    jobs.submit(job_document(job_id, ALGORITHM, **STOP_JOB))
    wait_until(lambda: jobs.get(job_id).epochs_done >= 1, "the stop job's first epoch", run)
    stops.server_s = sigterm(run, "server")
    store = JobStore(run.root / "runs" / "jobs.sqlite")
    try:
        record = store.get(job_id)
        stops.state, stops.epochs_done, stops.epochs_recorded = (
            record.state,
            record.epochs_done,
            len(store.epochs(job_id)),
        )
    finally:
        store.close()


@dataclass
class Outcome:
    """What one bench run saw: the jobs that ran, the daemons' pids, the stops, and what went wrong, if anything."""

    timings: list[JobTiming] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)
    window: Window | None = None
    stops: Stops = field(default_factory=Stops)
    error: str = ""


def run_service(root: Path) -> Outcome:
    """Start the server and the two daemons once, run the jobs, stop the daemons; logs' tails on failure."""
    pki = issue_pki(root / "pki", (2, 3))
    (root / "data").mkdir()
    write_digits_split(root / "data", seed=0)
    run = ServiceRun(root, pki, root / "data")
    outcome = Outcome()
    try:
        run.start_server()
        run.start_clients()
        outcome.pids = {name: run.procs[name].pid for name in DAEMONS}
        wait_for_daemons(run)
        print(f"daemon logs in {root}; each daemon is sampled {SETTLE_S:.0f} s after a job ends, to let it settle")
        print(job_header(), flush=True)
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            _, outcome.window = measured(lambda: run_jobs(run, jobs, outcome.timings), own_children=True)
            add_first_steps(run, outcome.timings)
            if len(outcome.timings) == JOBS and all(t.finished for t in outcome.timings):
                measure_stops(run, jobs, outcome.stops)
    except (VflError, RuntimeError, OSError, AssertionError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    finally:
        codes = run.stop()
    failed = [t for t in outcome.timings if not t.finished]
    if failed and not outcome.error:
        outcome.error = f"job {failed[0].job_id} ended {failed[0].state}: {failed[0].message}"
    if outcome.error:
        print(f"\nbench failed: {outcome.error}\n{run.tail(20)}", file=sys.stderr, flush=True)
    if any(codes.values()):
        print(f"daemon exit codes on SIGTERM: {codes}")
    return outcome


# ---- reporting ----------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return f"{value:8.2f}" if value is not None else f"{'-':>8}"


def _mib(sample: DaemonSample | None) -> str:
    return f"{sample.rss_kib / 1024:8.1f}" if sample is not None else f"{'gone':>8}"


def job_header() -> str:
    phases = f"{'queue':>8} {'join+PSI':>8} {'epoch 1':>8} {'->epoch':>8} {'wall':>8}"
    return f"{'job':>4} {'state':<9} {phases}   RSS MiB: {'server':>8} {'party-2':>8} {'party-3':>8}"


def job_line(index: int, t: JobTiming) -> str:
    phases = " ".join(
        _s(v)
        for v in (
            t.span(t.submitted, t.aligning),
            t.span(t.aligning, t.training),
            t.span(t.training, t.first_epoch),
            t.span(t.submitted, t.first_epoch),
            t.span(t.submitted, t.ended),
        )
    )
    rss = " ".join(_mib(t.samples.get(name)) for name in DAEMONS)
    return f"{index:>4} {t.state:<9} {phases}            {rss}"


def _stats_row(name: str, values: list[float]) -> str:
    if not values:
        return f"{name:<44} {'-':>8} {'-':>8} {'-':>8} {'-':>8}"
    p50, p99 = np.percentile(values, [50, 99])
    return f"{name:<44} {p50:8.3f} {p99:8.3f} {min(values):8.3f} {max(values):8.3f}"


def print_latencies(timings: list[JobTiming]) -> list[float]:
    """The latency table, per phase; returns the submit-to-first-epoch latencies of finished jobs."""
    done = [t for t in timings if t.finished]

    def spans(start: str, end: str) -> list[float]:
        found = (t.span(getattr(t, start), getattr(t, end)) for t in done)
        return [s for s in found if s is not None]

    latency = spans("submitted", "first_epoch")
    print(f"\n{'seconds, over ' + str(len(done)) + ' finished jobs':<44} {'p50':>8} {'p99':>8} {'min':>8} {'max':>8}")
    print(_stats_row("queue (submit -> aligning)", spans("submitted", "aligning")))
    print(_stats_row("join + PSI (aligning -> training)", spans("aligning", "training")))
    print(_stats_row("first epoch, with evaluation (-> epoch 1)", spans("training", "first_epoch")))
    print(_stats_row("submit -> first training step", spans("submitted", "first_step")))
    print(_stats_row("submit -> first epoch", latency))
    print(_stats_row("job wall time (submit -> watch ends)", spans("submitted", "ended")))
    psi = sum(t.alignment.endswith("(PSI)") for t in done)
    print(f"PSI ran on {psi} of {len(done)} finished jobs (each job id gets a fresh alignment)")
    print("job 1 was submitted once every daemon had started, warmed up and connected")
    return latency


def _count(first: int, last: int) -> str:
    return f"{first:>5} -> {last:<5}" + ("  GREW" if last > first else "")


def print_daemons(first: JobTiming, last: JobTiming, pids: dict[str, int]) -> float:
    """The per-daemon table, job 1 against the last job; returns the worst RSS growth (nan if unknown)."""
    last_job = last.job_id.removeprefix("bench-").lstrip("0")
    print(
        f"\n{'daemon':<9} {'pid':>8} {'RSS job 1':>10} {'RSS job ' + last_job:>11} {'growth':>7}"
        f"   {'threads':<15} {'open fds':<15}"
    )
    growths = []
    for name in DAEMONS:
        a, b = first.samples.get(name), last.samples.get(name)
        if a is None or b is None:
            print(f"{name:<9} exited before it could be sampled")
            growths.append(float("nan"))
            continue
        growth = b.rss_kib / a.rss_kib
        growths.append(growth)
        print(
            f"{name:<9} {pids.get(name, 0):>8} {a.rss_kib / 1024:6.1f} MiB {b.rss_kib / 1024:7.1f} MiB {growth:6.3f}x"
            f"   {_count(a.threads, b.threads):<15} {_count(a.fds, b.fds):<15}"
        )
    return float("nan") if any(np.isnan(growths)) else max(growths)


def machine_line(label: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"{label}: {os.cpu_count()} CPUs, load average {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min)"


# ---- the bench ----------------------------------------------------------------------------------


def bench_line(name: str, value: float, unit: str, op: str, target: float, met: bool) -> str:
    """One target's machine-readable verdict: ``BENCH <name> <value> <unit> target <op> <target> MET|MISSED``."""
    return f"BENCH {name} {value:.3f} {unit} target {op} {target:g} {'MET' if met else 'MISSED'}"


def first_step_ratio(timings: list[JobTiming]) -> tuple[float, float, float]:
    """(job 1's submit -> first step, the later jobs' median, their ratio); nan where unknown."""
    spans = [t.span(t.submitted, t.first_step) for t in timings if t.finished]
    if len(spans) < 2 or spans[0] is None:
        return float("nan"), float("nan"), float("nan")
    later = [s for s in spans[1:] if s is not None]
    median = float(np.median(later)) if later else float("nan")
    return spans[0], median, spans[0] / median


def _seconds(value: float | None) -> float:
    return float("nan") if value is None else value


def print_verdict(outcome: Outcome, latency: list[float], growth: float) -> None:
    """The figures the issues ask for, a BENCH line per target, and the headline last."""
    jobs_run = len(outcome.timings)
    if outcome.window is not None:
        steal = f"{outcome.window.steal:.2f}" if outcome.window.steal is not None else "unknown"
        print(f"hypervisor steal during the jobs: {steal} CPUs; all jobs took {outcome.window.wall_s:.0f} s")
    p50 = float(np.percentile(latency, 50)) if latency else float("nan")
    print(
        f"submit -> first epoch p50 {p50:.3f} s (aim <= {AIM_LATENCY_P50_S:.0f} s: "
        f"{'met' if p50 <= AIM_LATENCY_P50_S else 'missed'}); threads and open fds must not grow (GREW above if so)"
    )
    first, later, ratio = first_step_ratio(outcome.timings)
    print(f"submit -> first training step: job 1 {first:.3f} s, later jobs' median {later:.3f} s: {ratio:.2f}x")
    stops = outcome.stops
    client_s, server_s = _seconds(stops.client_s), _seconds(stops.server_s)
    print(f"SIGTERM -> exit: idle vfl-client {client_s:.2f} s; vfl-server with a job training {server_s:.2f} s")
    print(
        f"the job training at the server's stop: {stops.state or 'not run'}, {stops.epochs_done} epochs done, "
        f"{stops.epochs_recorded} in the store ({'nothing lost' if stops.nothing_lost else 'NOT as expected'})"
    )
    print(
        f"worst daemon RSS growth, after job {jobs_run} / after job 1: {growth:.3f} x "
        f"(target <= {TARGET_RSS_GROWTH:.2f}" + (f"; only {jobs_run} of {JOBS} jobs ran)" if jobs_run < JOBS else ")")
    )
    ran = jobs_run == JOBS and not outcome.error
    ratio_met = ran and ratio <= TARGET_FIRST_STEP_RATIO
    print(bench_line("service_first_step_ratio", ratio, "x", "<=", TARGET_FIRST_STEP_RATIO, ratio_met))
    client_met = client_s <= TARGET_CLIENT_STOP_S
    print(bench_line("service_client_stop_s", client_s, "s", "<=", TARGET_CLIENT_STOP_S, client_met))
    server_met = server_s <= TARGET_SERVER_STOP_S and stops.nothing_lost
    print(bench_line("service_server_stop_s", server_s, "s", "<=", TARGET_SERVER_STOP_S, server_met))
    growth_met = ran and growth <= TARGET_RSS_GROWTH
    print(
        f"BENCH service_rss_growth {growth:.3f} x target <= {TARGET_RSS_GROWTH:.2f} {'MET' if growth_met else 'MISSED'}"
    )


def main() -> int:
    print(
        f"== service: {JOBS} one-epoch {ALGORITHM} jobs on digits, back to back, on one vfl-server and two "
        "vfl-client daemons started once (processes, mTLS) =="
    )
    print(versions_line("grpcio", "torch", "numpy"))
    print(machine_line("machine before"), flush=True)
    with tempfile.TemporaryDirectory(prefix="vfl-bench-service-") as tmp:
        outcome = run_service(Path(tmp))
    timings = outcome.timings
    latency = print_latencies(timings)
    growth = print_daemons(timings[0], timings[-1], outcome.pids) if timings else float("nan")
    print()
    print(machine_line("machine after"))
    print_verdict(outcome, latency, growth)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
