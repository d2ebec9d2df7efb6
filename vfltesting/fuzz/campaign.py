"""Fuzz a live service while honest jobs train on it; every answer is judged as it comes back.

``run_campaign`` starts ``vfl-server`` (its inference endpoint and console on) and two
``vfl-client`` daemons as processes, trains a reference job, then keeps honest copies of it
training, one after another, while Hypothesis sends random and mutated inputs at every surface:
the federation, Control and inference RPCs, PSI's chunk streams, job tables, files the server
reads, the console (``live.py``), and, in the campaign's own process, the table reader, PSI on
any IDs and a party's config (``offline.py``). Then it serves a federated model and sends sample
IDs of any script and length at it by ID.

Each honest job must end with the reference job's per-step losses and final weights (within
1e-6: the same operations in the same order), the federated model's predictions for known IDs must not change
under the by-ID cases, and no daemon may die.
"""

from __future__ import annotations

import copy
import csv
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from vflclient import InferenceClient, JobClient
from vflcore.data.checkpoints import party_dir
from vfltesting.eventually import eventually
from vfltesting.fuzz.live import CALLER, FUZZ_TABLES, HONEST, OPERATOR, REFERENCE, LiveTargets, known_predictions
from vfltesting.fuzz.offline import OfflineTargets
from vfltesting.fuzz.report import Drawn, Report, Target
from vfltesting.pki import Pki
from vfltesting.recovery import job_outcome, loss_difference, weight_differences
from vfltesting.service import ServiceRun, job_document

LIVE_STATES = ("queued", "aligning", "training", "waiting")
#: The served federated model the by-ID cases are sent at.
FEDERATED = "fuzz-federated"
#: Known IDs whose predictions the by-ID cases must not change.
KNOWN_IDS = 20


class HonestJobs:
    """Copies of the reference job, submitted one behind the other so that one always trains."""

    def __init__(self, jobs: JobClient, document: dict[str, Any]) -> None:
        self.jobs, self.document = jobs, document
        self.submitted: list[str] = []

    def submit_next(self) -> None:
        job_id = f"{HONEST}-{len(self.submitted) + 1}"
        document = copy.deepcopy(self.document)
        document["job"]["job_id"] = job_id
        self.jobs.submit(document)
        self.submitted.append(job_id)

    def top_up(self) -> None:
        """Keep one honest job queued behind the one that trains (the runner takes the oldest first)."""
        live = [j for j in self.submitted[-2:] if self.jobs.get(j).state in LIVE_STATES]
        if len(live) < 2:
            self.submit_next()

    def training_now(self) -> bool:
        return any(self.jobs.get(j).state == "training" for j in self.submitted[-2:])

    def finish(self, run_dir: Path) -> tuple[float, float]:
        """Cancel the one still queued, let the others end; the largest loss and weight differences from the reference.

        Per-step losses and every party's final weights: the same operations in the same order
        give the same numbers, so an honest job that ends with another model was disturbed.
        """
        newest = self.submitted[-1]
        if self.jobs.get(newest).state == "queued":
            self.jobs.cancel(newest)
            self.submitted.pop()
        reference = job_outcome(run_dir, REFERENCE)
        losses = weights = 0.0
        for job_id in self.submitted:
            _finish(self.jobs, job_id)
            outcome = job_outcome(run_dir, job_id)
            losses = max(losses, loss_difference(outcome, reference))
            weights = max(weights, max(weight_differences(outcome, reference).values(), default=0.0))
        return losses, weights


def run_campaign(
    root: Path,
    pki: Pki,
    data: Path,
    *,
    cases: int,
    seed: int = 0,
    epochs: int = 5,
    only: str | None = None,
    stop_at: int | None = None,
    log: Callable[[str], None] = print,
) -> Report:
    """Start the service, train the reference job, fuzz every surface while honest jobs train; the report.

    ``only`` drives one target alone (a replay: ``report.replay_command``), sending its cases up
    to index ``stop_at``.
    """
    report = Report()
    tables = root / "fuzz-tables"
    _write_valid_tables(data / "party1.csv", tables)
    run = ServiceRun(
        root,
        pki,
        data,
        serving=True,
        server_tables={"console": {"enabled": True, "listen": "127.0.0.1:0"}},
        active_datasets={name: tables / f"party1{suffix}" for suffix, name in FUZZ_TABLES.items()},
    )
    root.mkdir(parents=True, exist_ok=True)
    run.start_server()
    run.start_clients()
    offline = OfflineTargets()
    try:
        with JobClient(run.address, tls=pki.operator_files(OPERATOR)) as jobs:
            document = job_document(REFERENCE, "apfed_c", epochs=epochs, batch_size=8)
            started = time.monotonic()
            jobs.submit(document)
            _finish(jobs, REFERENCE)
            log(f"reference job {REFERENCE!r}: {epochs} epochs in {time.monotonic() - started:.1f} s")
            honest = HonestJobs(jobs, {**document, "serving": {"enabled": False}})
            honest.submit_next()
            eventually(honest.training_now, "the first honest job to start training", every=0.05)
            inference = run.serving_ports()
            with InferenceClient(f"127.0.0.1:{inference[0]}", tls=pki.caller_files(CALLER)) as client:
                width = int(client.metadata(REFERENCE).inputs[0].shape[1])
            live = LiveTargets(run.address, inference, run.console_port(), pki, tables, width)
            try:
                targets = _chosen([*live.targets(), *offline.targets()], only)
                aligned: list[str] = []  # the federated model's aligned IDs, once it is served
                by_id = _chosen(live.by_id_targets(FEDERATED, aligned), only)
                # the by-ID targets get their share of the cases after the others
                later = cases * len(by_id) // max(1, len(targets) + len(by_id))
                started = time.monotonic()
                _drive_all(targets, cases - later, seed, report, run.alive, stop_at, between=honest.top_up)
                report.honest_running_at_end = honest.training_now()
                report.honest_jobs = len(honest.submitted)
                report.loss_difference, report.weight_difference = honest.finish(run.root / "runs")
                live.cancel_accepted()
                if by_id and not report.crashed:
                    _serve_federated(jobs, log)
                    with InferenceClient(f"127.0.0.1:{inference[0]}", tls=pki.caller_files(CALLER)) as client:
                        aligned.extend(_aligned_ids(run.root / "runs", FEDERATED))
                        ids = aligned[:KNOWN_IDS]
                        before = known_predictions(client, FEDERATED, ids)
                        _drive_all(by_id, later or cases, seed, report, run.alive, stop_at)
                        after = known_predictions(client, FEDERATED, ids)
                    report.predictions_unchanged = (
                        all((before[name] == after[name]).all() for name in before) and before.keys() == after.keys()
                    )
                report.seconds = time.monotonic() - started
            finally:
                live.close()
        report.crashed = report.crashed or [name for name, up in run.alive().items() if not up]
    finally:
        offline.close()
        run.close()
    return report


def _chosen(targets: list[Target], only: str | None) -> list[Target]:
    return [t for t in targets if only is None or t.label == only]


def _drive_all(
    targets: list[Target],
    cases: int,
    seed: int,
    report: Report,
    alive: Callable[[], dict[str, bool]],
    stop_at: int | None,
    between: Callable[[], None] = lambda: None,
) -> None:
    """At least ``cases`` more cases, spread evenly over ``targets``; stops as soon as a daemon dies.

    A target whose cases are few (an empty request) runs out early; the others take up what it
    left, in further rounds with the next seed (each case's ``Drawn`` says which).
    """
    goal, active, round_ = report.total + cases, list(targets), 0
    while report.total < goal and active:
        share = cases if stop_at is not None else max(1, -(-(goal - report.total) // len(active)))
        more = []
        for target in active:
            before = report.cases[target.label]
            drive(target, share, seed + round_, report, stop_at, between)
            between()
            if report.cases[target.label] - before >= share and stop_at is None:
                more.append(target)  # it may have new cases yet
            dead = [name for name, up in alive().items() if not up]
            if dead:
                report.crashed = dead
                return
        active, round_ = more, round_ + 1


#: Cases between two looks at the honest jobs.
SLICE = 200


def drive(
    target: Target, examples: int, seed: int, report: Report, stop_at: int | None, between: Callable[[], None]
) -> None:
    """Let Hypothesis draw ``examples`` cases for ``target`` from ``seed``; every answer is recorded, none raises.

    The draws depend on the seed and the example count alone, so a failure's ``Drawn`` replays it.
    """
    index = 0

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(target.cases)
    def case(value: Any) -> None:
        nonlocal index
        index += 1
        if stop_at is not None and index - 1 > stop_at:
            return
        report.record(target, target.send(value), value, Drawn(seed, examples, index - 1))
        if index % SLICE == 0:
            between()

    case()


def _serve_federated(jobs: JobClient, log: Callable[[str], None]) -> None:
    """Train and serve a small SplitNN model, answered by ID with both passive parties."""
    started = time.monotonic()
    jobs.submit(job_document(FEDERATED, "splitnn", epochs=2))
    _finish(jobs, FEDERATED)
    log(f"federated job {FEDERATED!r}: served after {time.monotonic() - started:.1f} s; the by-ID cases start")


def _aligned_ids(run_dir: Path, job_id: str) -> list[str]:
    with (party_dir(run_dir, job_id, 1) / "aligned_ids.csv").open(newline="", encoding="utf-8") as fh:
        rows = [row[0] for row in csv.reader(fh) if row]
    return rows[1:] if rows and rows[0] == "id" else rows


def _write_valid_tables(source: Path, folder: Path) -> None:
    """The fuzzed datasets' files, valid until the first case rewrites them (the server starts with them)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "party1.csv").write_bytes(source.read_bytes())
    pq.write_table(pacsv.read_csv(source), folder / "party1.parquet")


def _finish(jobs: JobClient, job_id: str) -> None:
    for _ in jobs.watch(job_id):
        pass
    state = jobs.get(job_id).state
    if state != "finished":
        raise RuntimeError(f"job {job_id} ended {state}: {jobs.get(job_id).error}")
