"""FedBCD and VIMSGD over real gRPC and mTLS compute what their in-process references compute.

Same shape as the SplitNN reference test: one digits job trained federated (server and two
passive parties in this process, servers on port 0) and by ``vflalgorithms.reference``; every step's
loss must agree within 1e-5, and the federated model must reach the stated accuracy bar.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflalgorithms.vimadmm.active import VIMADMMServer
from vflclient import read_party_csv
from vflcore.job.spec import JobSpec
from vfltesting.equivalence import TOP_HIDDEN, Comparison, assert_same_steps, compare
from vfltesting.in_process import run_whole_job
from vfltesting.jobs import REFERENCE_JOB
from vfltesting.pki import Pki

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]

# Each job is the SplitNN reference test's digits job (seed 7, batches of 64, 15 an epoch, Adam at
# 0.003, the active party with features of its own, 4 epochs) with another algorithm: every round's
# loss equal to the reference's is shown as well by a short run as by a long one
# (``equivalence.MIN_STEPS``: 60), and the bars below only say that the model learns (chance is 0.1).
# 7 epochs before: 4 (and the Q = 1 test without references) cut the module's CPU from 43.7 to 29.7
# CPU-s (one process, user+sys).
FEDBCD_JOB = replace(REFERENCE_JOB, job_id="fedbcd-digits", algorithm="fedbcd", algorithm_options={"local_steps": 3})
#: FedBCD with Q = 1 against SplitNN: 2 epochs (30 steps, an epoch's turn inside). The test holds the
#: two federated runs' losses equal bit for bit, which a short run shows as well as a long one; it
#: has no accuracy bar, and needs no reference (both runs are federated).
Q1_EPOCHS = 2
FEDBCD_Q1_JOB = replace(
    REFERENCE_JOB, job_id="fedbcd1-digits", algorithm="fedbcd", epochs=Q1_EPOCHS, algorithm_options={"local_steps": 1}
)
VIMSGD_JOB = replace(REFERENCE_JOB, job_id="vimsgd-digits", algorithm="vimsgd")
#: τ = 10, the default, for the labels-only test below (at τ = 5 its 2 epochs reached 0.902).
TEN_LOCAL_STEPS = {"local_steps": 10, "rho": 1.0}
#: τ = 2 local steps on every party in each of the 60 rounds (with an exact z solve), for VIMADMM and
#: VIMADMM-J: every loss is held to the reference's whatever τ is, and τ = 2 still runs a local step
#: past the first (the one that recomputes the embedding). τ = 10, then 5, before: at these 4 epochs
#: the VIMADMM comparison cost 8.95 CPU-s at τ = 10 and 5.68 at τ = 5; 5 to 2 cut each comparison by
#: about 3 CPU-s (VIMADMM-J 8.0 to 5.0, one process, 2026-11-29).
ADMM_OPTIONS = {"local_steps": 2, "rho": 1.0}
VIMADMM_JOB = replace(REFERENCE_JOB, job_id="vimadmm-digits", algorithm="vimadmm", algorithm_options=ADMM_OPTIONS)
VIMADMM_J_JOB = replace(VIMADMM_JOB, job_id="vimadmm-j-digits", algorithm="vimadmm_j")
# Bars on the 234 held-out digits. At these 4 epochs the runs reached 0.893 (FedBCD), 0.893 (VIMSGD),
# 0.927 (VIMADMM, τ = 2; 0.944 at τ = 5, 0.970 at τ = 10) and 0.927 (VIMADMM-J, τ = 2; 0.966 at τ = 5);
# at 7 epochs 0.936, 0.940, 0.987 and 0.979 (bars 0.92, 0.92, 0.95, 0.95). Each bar sits about 0.04
# below its run's figure (VIMADMM's 0.90 and VIMADMM-J's 0.93 were set at τ = 5).
FEDBCD_ACCURACY_BAR = 0.85
VIMSGD_ACCURACY_BAR = 0.85
VIMADMM_ACCURACY_BAR = 0.89
VIMADMM_J_ACCURACY_BAR = 0.89


def _run(job: JobSpec, pki: Pki, data: Path, tmp: pytest.TempPathFactory) -> Comparison:
    return compare(job, data, pki, tmp.mktemp(job.job_id))


@pytest.fixture(scope="module")
def fedbcd(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    return _run(FEDBCD_JOB, pki, digits_data, tmp_path_factory)


@pytest.fixture(scope="module")
def vimadmm(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    return _run(VIMADMM_JOB, pki, digits_data, tmp_path_factory)


@pytest.fixture(scope="module")
def vimsgd(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    return _run(VIMSGD_JOB, pki, digits_data, tmp_path_factory)


class TestFedBCD:
    def test_every_round_loss_matches_the_reference(self, fedbcd: Comparison) -> None:
        """Q = 3 steps of every bottom model a round, one of the top: each of 60 round losses agrees within 1e-5."""
        assert_same_steps(fedbcd)

    def test_federated_model_reaches_the_accuracy_bar(self, fedbcd: Comparison) -> None:
        assert fedbcd.federated.final_metrics["accuracy"] >= FEDBCD_ACCURACY_BAR

    def test_one_local_step_is_splitnn_exactly(
        self, pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        """FedBCD with Q = 1 gives SplitNN's losses, step for step, bit for bit."""
        splitnn_job = replace(REFERENCE_JOB, job_id="splitnn-for-q1", epochs=Q1_EPOCHS)
        runs = [
            run_whole_job(pki, digits_data, tmp_path_factory.mktemp(job.job_id), job, top_hidden=TOP_HIDDEN)
            for job in (FEDBCD_Q1_JOB, splitnn_job)
        ]
        fedbcd_losses, splitnn_losses = (np.array(run.active.algorithm.step_losses) for run in runs)
        assert len(fedbcd_losses) == 15 * Q1_EPOCHS
        assert np.array_equal(fedbcd_losses, splitnn_losses)

    def test_local_steps_lower_the_loss_per_communication_round(self, fedbcd: Comparison, digits_data: Path) -> None:
        """The point of Q > 1: over the first two epochs (30 rounds), the mean training loss per
        round is well below SplitNN's on the same job (seen: 1.23 against 2.01)."""
        tables = {1: read_party_csv(digits_data / "party1.csv", label_column="label")}
        tables.update({p: read_party_csv(digits_data / f"party{p}.csv") for p in REFERENCE_JOB.passive_parties})
        splitnn = ReferenceSplitNN.from_tables(REFERENCE_JOB, tables, top_hidden=TOP_HIDDEN)
        for epoch in range(2):
            splitnn.train_epoch(epoch)
        rounds = len(splitnn.step_losses)
        assert np.mean(fedbcd.federated_losses[:rounds]) < 0.8 * np.mean(splitnn.step_losses)


class TestVIMSGD:
    def test_every_round_loss_matches_the_reference(self, vimsgd: Comparison) -> None:
        """Linear heads updated before the embeddings' gradients: each of 60 losses agrees within 1e-5."""
        assert_same_steps(vimsgd)

    def test_federated_model_reaches_the_accuracy_bar(self, vimsgd: Comparison) -> None:
        assert vimsgd.federated.final_metrics["accuracy"] >= VIMSGD_ACCURACY_BAR


class TestVIMADMM:
    def test_every_round_loss_matches_the_reference(self, vimadmm: Comparison) -> None:
        """z, λ, heads on the server, λ/s/W over PushADMMState, τ local steps: 60 losses agree within 1e-5."""
        assert_same_steps(vimadmm)

    def test_federated_model_reaches_the_accuracy_bar(self, vimadmm: Comparison) -> None:
        assert vimadmm.federated.final_metrics["accuracy"] >= VIMADMM_ACCURACY_BAR

    def test_duals_match_the_reference(self, vimadmm: Comparison) -> None:
        """The server's λ for every training row is the reference's, after its 4 epochs."""
        assert isinstance(vimadmm.algorithm, VIMADMMServer)
        assert torch.allclose(vimadmm.algorithm.duals, vimadmm.reference.duals, atol=1e-4)


@pytest.fixture(scope="module")
def joint(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    return _run(VIMADMM_J_JOB, pki, digits_data, tmp_path_factory)


class TestVIMADMMJ:
    def test_every_round_loss_matches_the_reference(self, joint: Comparison) -> None:
        """Logits up, λ and s^k back by PushADMMState, head then bottom τ times: 60 losses within 1e-5."""
        assert_same_steps(joint)

    def test_federated_model_reaches_the_accuracy_bar(self, joint: Comparison) -> None:
        """The prediction is the sum of every party's logits; each party's head never left it."""
        assert joint.federated.final_metrics["accuracy"] >= VIMADMM_J_ACCURACY_BAR


def test_vimadmm_j_with_a_labels_only_active_party(pki: Pki, digits_data: Path, tmp_path: Path) -> None:
    """The active party may hold labels and no features: then the server has no parameters at all,
    only the ADMM state, and the prediction is the passive parties' logits alone."""
    data = tmp_path / "data"
    data.mkdir()
    lines = (digits_data / "party1.csv").read_text().splitlines()
    header = lines[0].split(",")
    keep = [header.index("id"), header.index("label")]
    (data / "party1.csv").write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in lines) + "\n")
    for party in (2, 3):
        (data / f"party{party}.csv").write_text((digits_data / f"party{party}.csv").read_text())
    # τ = 10 here: at τ = 5 the 2 epochs reached 0.902, too near the bar. 1 epoch, not 2: it reached
    # 0.919 (0.936 after 2), and the job cost 2.1 CPU-s rather than 4.0 (measured in one process).
    job = replace(VIMADMM_J_JOB, job_id="vimadmm-j-labels-only", epochs=1, algorithm_options=TEN_LOCAL_STEPS)
    running = run_whole_job(pki, data, tmp_path, job)
    assert running.active.table.features.shape[1] == 0
    assert running.summary().final_metrics["accuracy"] >= 0.88  # seen: 0.919 (rows 3-7 of each digit, 1 epoch)
