"""One privacy-bench run: a job on the running service, then the attack probes on what one passive party recorded.

The service is ``vfl-server`` plus two passive parties, each an OS process over mTLS, started
once (``PrivacyService``) and given job after job through the Control API, as an operator would.
The passive parties are ``bench.privacy.party``: the stock daemon with a ``LinkRecorder``.

A run's figures come from three places, each the one that legitimately holds them:
- utility: the job's final metrics, as the server reports them to the operator (test ROC AUC
  on binary tasks, accuracy on multi-class ones);
- the attacks: ``vfltesting.privacy_probe.probe`` on the attacked party's recording, scored against the
  bench's own copy of the labels and features, in the aligned order it wrote;
- ε: label DP's is the job's ``label_dp_epsilon``; the embedding noise's is what the party's own
  accountant wrote to ``privacy.json`` in its job folder, or for APFed's h^A what the active
  party's wrote to its ``summary.json`` (``privacy.active_embedding``).
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.privacy.tasks import ATTACKED_PARTY, Task
from vflclient import JobClient, VflError
from vflcore.data.checkpoints import party_dir
from vflcore.job.document import job_from_document
from vfltesting.privacy_probe import STRONGER_KEYS, probe
from vfltesting.service import ServiceRun, start_daemon

#: The probe's figures, in the order the table prints them.
ATTACKS = (
    "norm_auc",
    "direction_auc_k1",
    "direction_auc_k10",
    "completion_1pct",
    "completion_raw_1pct",
    "completion_5pct",
    "completion_raw_5pct",
    "inversion_r2",
    "inversion_mse",
    "inversion_baseline_mse",
    "strongest_auc_run",
)
#: Also in the CSV: the label attacks' highest AUC over the epochs (the table shows the last epoch's),
#: VIMADMM's and VIMADMM-J's attacks on the residual s^k_B, and the stronger attacker's figures
#: (``vfltesting.privacy_probe``: each attack on the last epoch, the strongest per phase).
OVER_EPOCHS = (
    "norm_auc_max",
    "direction_auc_k1_max",
    "residual_norm_auc",
    "residual_direction_auc_k1",
    "residual_direction_auc_k1_max",
    *(key for key in STRONGER_KEYS if key not in ATTACKS),
)
NAN = float("nan")
#: How long a passive party may take, after the server's job has ended, to write its end-of-job files.
PARTY_DONE_S = 30.0


class PrivacyService(ServiceRun):
    """``ServiceRun`` whose passive parties are recording ``bench.privacy.party`` processes, not ``vfl-client``."""

    @property
    def record(self) -> Path:
        return self.root / "record"

    def start_client(self, party: int, server: str | None = None) -> None:
        log = self.root / f"party-{party}.log"
        self.logs[f"party-{party}"] = log
        config = self.client_config(party, server or self.via.get(party) or self.address)
        command = [sys.executable, "-m", "bench.privacy.party", "--config", str(config), "--party", str(party)]
        command += ["--record", str(self.record), "--log-format", "json"]
        # exec'd, as vfl-server is, unless the caller forks the daemons (the suite's smoke test: ``daemons_forked_by``)
        self.procs[f"party-{party}"] = start_daemon(command, log, append=True, cwd=self.root)


@dataclass(frozen=True)
class Run:
    """One job: a task, an algorithm, a defence setting (its ``[privacy]`` table) and the job's seed.

    The seed decides the model's first weights and the train/test split; the defence's noise comes
    from a secret key each job draws afresh, whatever its seed.
    """

    task: str
    algorithm: str
    setting: str
    privacy: dict[str, Any]
    seed: int = 0

    @property
    def job_id(self) -> str:
        return f"{self.task}-{self.algorithm}-{self.setting}-s{self.seed}"


@dataclass
class Outcome:
    """What one run measured; NaN where a figure does not apply or was not produced."""

    run: Run
    state: str = "not run"
    message: str = ""
    utility: float = NAN
    attacks: dict[str, float] = field(default_factory=dict)
    label_epsilon: float = NAN
    embedding_epsilon: float = NAN
    #: The job's wall time (submit until it ended), and the probes' after it.
    seconds: float = NAN
    probe_seconds: float = NAN

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    def attack(self, name: str) -> float:
        return self.attacks.get(name, NAN)


def job_document(run: Run, task: Task, job: dict[str, Any]) -> dict[str, Any]:
    """The job file an operator would submit for ``run``: ``job`` (the bench's shared settings) on its dataset."""
    document: dict[str, Any] = {
        "job": {
            "job_id": run.job_id,
            "algorithm": run.algorithm,
            "task": "classification",
            "dataset": task.name,
            "passive_parties": [2, 3],
            "seed": run.seed,
            "test_fraction": 0.2,
            "join_timeout_s": 60,
            **job,
        },
        "model": {"top_hidden": [32]},
    }
    if run.privacy:
        document["privacy"] = dict(run.privacy)
    return document


def execute(service: PrivacyService, jobs: JobClient, run: Run, task: Task, job: dict[str, Any]) -> Outcome:
    """Submit ``run``'s job, follow it to its end, and probe party 2's recording if it finished."""
    outcome = Outcome(run)
    document = job_document(run, task, job)
    started = time.perf_counter()
    try:
        jobs.submit(document)
        ended = jobs.wait(run.job_id)
    except VflError as exc:  # refused at submit (e.g. a defence this algorithm cannot apply)
        outcome.state, outcome.message = "refused", str(exc)
        return outcome
    finally:
        outcome.seconds = time.perf_counter() - started
    outcome.state, outcome.message = ended.state, ended.error
    outcome.utility = ended.final_metrics.get(task.utility_metric, NAN)
    outcome.label_epsilon = float(run.privacy.get("label_dp_epsilon", 0)) or NAN
    if not outcome.finished:
        return outcome
    passive = party_dir(service.root / "runs", run.job_id, ATTACKED_PARTY)
    if not _party_done(passive):
        outcome.message = f"party {ATTACKED_PARTY} did not write its end-of-job files within {PARTY_DONE_S:.0f} s"
    outcome.embedding_epsilon = _embedding_epsilon(passive)
    if math.isnan(outcome.embedding_epsilon):  # APFed: the active party's noise on h^A
        outcome.embedding_epsilon = _active_embedding_epsilon(party_dir(service.root / "runs", run.job_id, 1))
    with (passive / "aligned_ids.csv").open(newline="", encoding="utf-8") as handle:
        ids = [row["id"] for row in csv.DictReader(handle)]
    features, labels = task.aligned(ids)
    spec = replace(job_from_document(document, f"bench run {run.job_id}"), num_rows=len(ids))
    try:
        outcome.attacks = probe(service.record / run.job_id / f"party-{ATTACKED_PARTY}", spec, features, labels)
    except Exception as exc:  # a probe that fails is reported in its row; the other runs go on
        outcome.message = f"probe failed: {type(exc).__name__}: {exc}"
    outcome.probe_seconds = time.perf_counter() - started - outcome.seconds
    return outcome


def _party_done(folder: Path) -> bool:
    """Wait until the party has handled Finish: the server's job ends first, the party's last files after.

    ``wire_bytes.json`` is the party's last write of a job (after ``privacy.json``'s ε), so its
    presence says the recording and the report are complete.
    """
    deadline = time.monotonic() + PARTY_DONE_S
    while not (folder / "wire_bytes.json").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _active_embedding_epsilon(folder: Path) -> float:
    """ε of the active party's noise on APFed's h^A, from its ``summary.json``; NaN where it added none."""
    try:
        privacy = json.loads((folder / "summary.json").read_text()).get("privacy", {})
    except (OSError, ValueError):
        return NAN
    report = privacy.get("active_embedding") if isinstance(privacy, dict) else None
    if not isinstance(report, dict) or "epsilon" not in report:
        return NAN
    return math.inf if report["epsilon"] is None else float(report["epsilon"])


def _embedding_epsilon(folder: Path) -> float:
    """ε of party 2's embedding noise, as its accountant wrote it (``privacy.json``); NaN if it wrote none."""
    path = folder / "privacy.json"
    if not path.exists():
        return NAN
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return NAN
    if not isinstance(report, dict) or "epsilon" not in report:
        return NAN
    value = report["epsilon"]
    return math.inf if value is None else float(value)  # JSON has no infinity: None stands for it
