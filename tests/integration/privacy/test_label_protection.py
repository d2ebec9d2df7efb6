"""The active party's label protection in a real service: applied, reported, and resumed without a difference.

``vfl-server`` and two ``vfl-client`` daemons run as OS processes over mTLS (``vfltesting.service``)
on sklearn's breast cancer set (569 rows, binary), split between the three parties. A SplitNN job
with Marvell (its batches crossing in two micro-batch parts), one with randomised-response labels,
a VIMADMM job with Marvell on λ_B and s^k_B, and an APFed-C job with the active party's noise on
h^A each run once undisturbed, and once with ``vfl-server`` killed (kill -9) inside epoch 2 and
restarted: the restarted process reads its noise key back from the job's folder, redraws the same
labels and the same noise, and the job ends with the same per-step losses and weights.

Both runs share one set of daemons, as two jobs of the same settings, and hold the same noise
key (the killed job's folder gets a copy of the clean job's key before it is submitted): the key
is the active party's secret, and it alone decides the noise, which is what the comparison shows.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vflclient import JobClient
from vflcore.data.checkpoints import party_dir
from vflprivacy.noise import KEY_FILE
from vfltesting.freeze import frozen_inside_epoch
from vfltesting.pki import Pki
from vfltesting.recovery import assert_same_model, job_outcome
from vfltesting.service import ServiceRun, finish_job, job_document

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

EPOCHS = 3
#: Batches of 32: 15 steps an epoch, enough to be frozen and killed inside one (``frozen_inside_epoch``
#: finds the moment by events, so a short epoch is as good as a long one). At batch 8 (57 steps)
#: every job cost twice the training time, and the file's 9 jobs were its whole cost; batch 16 (29
#: steps) to 32 took the file from 74 to 56 CPU-s (2026-11-29), every job still at 0.965-0.991 accuracy.
JOB = {"batch_size": 32, "embedding_dim": 8, "bottom_hidden": [16], "learning_rate": 0.01}
#: The ``[privacy]`` table and ``[algorithm]`` options of each SplitNN job; "plain" is the undefended run.
JOBS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "plain": ({}, {}),
    "marvell": ({"label_defence": "marvell", "marvell_sum_kl": 0.25}, {"micro_batches": 2}),
    "label-dp": ({"label_dp_epsilon": 1.0}, {}),
    # τ = 2 local steps, not the default 10: the defence acts on λ_B and s^k_B, which τ does not
    # change, and at 10 this job cost as much as the four others together
    "admm": ({"label_defence": "marvell", "marvell_sum_kl": 0.25}, {"local_steps": 2}),
    "apfed": ({"active_embedding_clip": 1.0, "active_embedding_noise_multiplier": 1.0}, {}),
}
#: The jobs that are not SplitNN.
ALGORITHM = {"admm": "vimadmm", "apfed": "apfed_c"}
SERVER = {"party_timeout_s": 60, "heartbeat_timeout_s": 3}
CLIENT = {"heartbeat_s": 0.3}


def _document(name: str, job_id: str) -> dict[str, dict[str, Any]]:
    privacy, options = JOBS[name]
    algorithm = ALGORITHM.get(name, "splitnn")
    document = job_document(job_id, algorithm, epochs=EPOCHS, algorithm_options=options, **JOB)
    if privacy:
        document["privacy"] = dict(privacy)
    return document


def _service(root: Path, pki: Pki, data: Path) -> ServiceRun:
    root.mkdir(parents=True, exist_ok=True)
    run = ServiceRun(root, pki, data, serving=False, server_settings=SERVER, client_settings=CLIENT)
    run.start_server()
    run.start_clients()
    return run


def _key(root: Path, job_id: str) -> Path:
    return party_dir(root / "runs", job_id, 1) / KEY_FILE


def _pin_key(path: Path, name: str) -> None:
    """Put a noise key made from the job's name where the active party looks for it.

    Why pinned: label DP at ε = 1 on these 455 rows and 4 epochs reaches 0.68 to 0.96
    accuracy depending on the key (12 keys, median 0.92, measured here), so a fresh secret
    key failed the bar about once in ten runs. This key's run reached 0.92 at 4 epochs, and
    0.965 at the 3 the file now trains (2026-11-28; every job here then 0.94-0.99); in batches
    of 16, 0.974 (2026-11-29; every job here 0.974-0.982); in batches of 32, 0.965 (2026-11-29;
    every job here 0.965-0.991, the killed ones the same as their clean runs).
    Mode 0644 on purpose: the active party must tighten it to 0600 when it reads it.
    """
    path.parent.mkdir(parents=True)
    path.write_bytes(hashlib.blake2b(f"{name}-c".encode(), digest_size=32).digest())
    path.chmod(0o644)


@pytest.fixture(scope="module")
def service(pki: Pki, cancer_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """The daemons every test of this module uses (a test that kills the server restarts it)."""
    run = _service(tmp_path_factory.mktemp("labels"), pki, cancer_data)
    try:
        yield run
    finally:
        run.close()


@pytest.fixture(scope="module")
def clean(service: ServiceRun, pki: Pki) -> dict[str, Any]:
    """Every job run undisturbed: their outcomes, summaries and the server's log."""
    root = service.root
    found: dict[str, Any] = {"outcomes": {}, "summaries": {}, "root": root}
    with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
        for name in JOBS:
            job_id = f"labels-{name}"
            if JOBS[name][0]:  # a fixed noise key: a fresh secret one made the accuracy bar hold only mostly
                _pin_key(_key(root, job_id), name)
            jobs.submit(_document(name, job_id))
            finish_job(jobs, service, job_id)
            found["outcomes"][name] = job_outcome(root / "runs", job_id)
            summary = party_dir(root / "runs", job_id, 1) / "summary.json"
            found["summaries"][name] = json.loads(summary.read_text())
    found["log"] = service.logs["server"].read_text()
    return found


class TestApplied:
    """Each defence changes what training does, and the active party says what it applied."""

    def test_each_defence_changes_the_training_from_its_second_step(self, clean: dict[str, Any]) -> None:
        """Same seed, same data: the first step's loss is the undefended one, and the perturbed answers
        (or the randomised labels) change the run from there on."""
        plain = clean["outcomes"]["plain"].losses
        for name in ("marvell", "label-dp"):  # the other jobs are of other algorithms
            losses = clean["outcomes"][name].losses
            assert len(losses) == len(plain)
            if name == "marvell":  # the labels are the true ones: the first step's loss is the same
                assert losses[0] == pytest.approx(plain[0], abs=1e-6)
            assert max(abs(a - b) for a, b in zip(losses[1:], plain[1:], strict=True)) > 1e-3, name

    def test_both_defended_jobs_still_learn(self, clean: dict[str, Any]) -> None:
        """Utility survives: the defended models separate the held-out classes far better than chance."""
        for name in JOBS:
            accuracy = clean["summaries"][name]["final_metrics"]["accuracy"]
            assert accuracy > 0.8, (name, accuracy)

    def test_the_summary_and_the_log_state_the_settings_and_epsilon(self, clean: dict[str, Any]) -> None:
        """summary.json holds the [privacy] settings and label DP's ε and keep probability; the log says so too."""
        dp = clean["summaries"]["label-dp"]["privacy"]
        assert dp["label_dp_epsilon"] == 1.0
        assert dp["label_dp"]["epsilon"] == 1.0 and dp["label_dp"]["classes"] == 2
        assert dp["label_dp"]["keep_probability"] == pytest.approx(math.e / (math.e + 1))
        assert clean["summaries"]["marvell"]["privacy"]["label_defence"] == "marvell"
        assert clean["summaries"]["plain"]["privacy"]["label_defence"] == "none"
        lines = [json.loads(line) for line in clean["log"].splitlines() if line.startswith("{")]
        said = [line for line in lines if line.get("event") == "label_protection"]
        assert {line.get("label_defence") for line in said} == {"marvell", "none"}
        assert any(line.get("label_dp", {}).get("epsilon") == 1.0 for line in said)

    def test_the_noise_key_is_secret_and_only_where_labels_are_protected(self, clean: dict[str, Any]) -> None:
        """Mode 0600 in the active party's job folder (put there 0644, tightened); an undefended job has none."""
        for name in ("marvell", "label-dp"):
            key = _key(clean["root"], f"labels-{name}")
            assert key.stat().st_mode & 0o777 == 0o600
        assert not _key(clean["root"], "labels-plain").exists()

    def test_apfed_reports_epsilon_of_what_it_sent(self, clean: dict[str, Any]) -> None:
        """APFed-C with noise on h^A: one release an epoch, and ε from the accountant in summary.json."""
        released = clean["summaries"]["apfed"]["privacy"]["active_embedding"]
        assert released["releases"] == EPOCHS and released["noise_multiplier"] == 1.0 and released["clip"] == 1.0
        assert 0 < released["epsilon"] < math.inf


class TestResume:
    @pytest.mark.parametrize("name", ["marvell", "label-dp", "admm", "apfed"])
    def test_server_killed_inside_epoch_2_gives_the_same_run(
        self, name: str, clean: dict[str, Any], service: ServiceRun, pki: Pki
    ) -> None:
        """kill -9 of vfl-server inside epoch 2, then a restart: the same noise and labels, the same per-step losses."""
        job_id = f"labels-{name}-killed"
        key = _key(service.root, job_id)
        key.parent.mkdir(parents=True)
        shutil.copyfile(_key(clean["root"], f"labels-{name}"), key)
        key.chmod(0o600)
        with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
            jobs.submit(_document(name, job_id))
            with frozen_inside_epoch(service, jobs, job_id, 1) as done:  # party 3 holds the training there
                service.kill("server")
        service.start_server(f"127.0.0.1:{service.port}")
        with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
            lines = finish_job(jobs, service, job_id)
        resumed = [line for line in lines if "resuming after" in line]
        assert any(f"resuming after {n} of {EPOCHS}" in line for line in resumed for n in (done, done + 1)), lines
        assert_same_model(job_outcome(service.root / "runs", job_id), clean["outcomes"][name])
