"""The attack probes work: on an undefended SplitNN job over real mTLS, each recovers what it should.

Two passive parties train with the active party on sklearn's breast cancer set (569 rows, 30
features split 10/10/10), each recording what crossed its link through its own code path
(``PassiveParty(..., recorder=LinkRecorder(folder))``). The probes then run on party 2's
recording. A probe that cannot beat its no-information baseline here would prove nothing when
a defence brings it down, so each is asserted above that baseline by a margin measured on this job.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vflclient import Connection, PassiveParty, RunResult, read_party_csv
from vflcore.job.privacy import PrivacySpec
from vflcore.job.spec import JobSpec
from vflcore.runtime.config import ClientSettings
from vflcore.wire.names import EMBEDDING
from vflprivacy.recording import RECEIVED, SENT, LinkRecorder, Recording
from vfltesting.in_process import start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki
from vfltesting.privacy_probe import KEYS, PROBED, probe

pytestmark = pytest.mark.integration

CANCER_JOB = JobSpec(
    job_id="cancer",
    seed=0,
    epochs=8,
    batch_size=64,
    embedding_dim=8,
    bottom_hidden=(16,),
    learning_rate=0.01,
    test_fraction=0.2,
    passive_parties=(2, 3),
)


def _run_recorded(
    pki: Pki, data: Path, tmp_path: Path, job: JobSpec, top_hidden: tuple[int, ...] = (16,)
) -> tuple[Any, dict[int, PassiveParty]]:
    """Serve ``job`` and run both passive parties to the end, each recording under tmp_path/rec-<party>."""
    running = start_job(pki, data, tmp_path, job, top_hidden=top_hidden)
    parties: dict[int, PassiveParty] = {}
    results: dict[int, RunResult | BaseException] = {}

    def run(party: int) -> None:
        try:
            table = read_party_csv(data / f"party{party}.csv")
            with Connection(running.address, party, tls=pki.party_files(party), connect_timeout_s=20) as conn:
                parties[party] = PassiveParty(
                    party,
                    table,
                    ClientSettings(run_dir=tmp_path / "runs"),
                    recorder=LinkRecorder(tmp_path / f"rec-{party}"),
                )
                results[party] = parties[party].run(conn)
        except BaseException as exc:
            results[party] = exc

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in job.passive_parties]
    for thread in threads:
        thread.start()
    try:
        running.summary()
        for thread in threads:
            thread.join(60)
    finally:
        running.server.stop(grace=None)
    assert all(isinstance(r, RunResult) and r.success for r in results.values()), results
    return running, parties


@dataclass(frozen=True)
class Undefended:
    """The undefended SplitNN job on the cancer set: party 2's recording, its labels, and the probes' figures."""

    recording: Path
    labels: np.ndarray
    figures: dict[str, float]


@pytest.fixture(scope="module")
def undefended(
    one_torch_thread: None, pki: Pki, cancer_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Undefended:
    """``CANCER_JOB`` undefended, trained and probed once: the baseline test's job is also the "none"
    run every defence below is held against (the same job, data and seeds; it trained twice before)."""
    tmp_path = tmp_path_factory.mktemp("undefended")
    running, parties = _run_recorded(pki, cancer_data, tmp_path, CANCER_JOB)
    party = parties[2]
    assert party.table is not None
    labels = np.asarray(running.active.table.labels)
    figures = probe(tmp_path / "rec-2", party.job or CANCER_JOB, party.table.features, labels, seed=0)
    return Undefended(tmp_path / "rec-2", labels, figures)


class TestProbesOnAnUndefendedSplitNNJob:
    def test_every_probe_beats_its_baseline(self, undefended: Undefended) -> None:
        """Direction attack AUC >= 0.9; norm AUC, model completion and inversion each beat no information."""
        recording = Recording(undefended.recording)
        assert "embedding" in recording.names(SENT) and recording.names(RECEIVED) == {"gradient"}
        assert recording.aligned_rows() == len(undefended.labels)

        figures = undefended.figures
        print({k: round(v, 3) for k, v in figures.items()})
        assert set(figures) == set(KEYS)
        # Measured on this job (probe seeds 0-5, party 2): direction 1.000 (k = 1 and 10), norm 0.809,
        # completion 0.80-0.93 at 1 % and 0.92-0.93 at 5 % (raw features: 0.79-0.92), inversion
        # MSE 0.26-0.31 against the mean's 1.01-1.04 (mean R² 0.69-0.74).
        assert figures["direction_auc_k1"] >= 0.9
        assert figures["direction_auc_k10"] >= 0.9
        assert figures["norm_auc"] >= 0.7
        assert figures["completion_1pct"] >= 0.7
        assert figures["completion_5pct"] >= 0.8
        assert figures["inversion_mse"] <= 0.5 * figures["inversion_baseline_mse"]
        assert figures["inversion_r2"] >= 0.5
        # The stronger attacker (issue 48), measured on this job (probe seed 0): |cos| 0.992, norm over
        # the batch median 0.777, the learned probes (1 label per batch, 10 in all) and 2-means 1.000,
        # rows averaged over epochs 1.000. The ratio's dispersion reads 0.507 here: undefended, both
        # classes stand out of their batch's median (confident rows far below it, the rarer class
        # above), so it finds nothing until a defence evens the classes' norms (issue 48: 0.811 on
        # FedBCD with Marvell 0.25).
        assert figures["abs_direction_auc_k1"] >= 0.9
        assert figures["relative_norm_auc"] >= 0.7
        assert figures["probe_auc_per_batch"] >= 0.9 and figures["probe_auc_k10"] >= 0.9
        assert figures["cluster_auc"] >= 0.9
        assert figures["averaged_strongest_auc"] >= 0.9
        phases = ("strongest_auc_first10", "strongest_auc_last10", "strongest_auc_run")
        assert all(figures[key] >= max(figures["direction_auc_k1"], figures["norm_auc"]) for key in phases)

    @pytest.mark.parametrize(
        ("algorithm", "options"),
        [
            ("splitnn", {"micro_batches": 3}),
            ("fedbcd", {}),
            ("async", {}),
            ("vimsgd", {}),
            # τ = 2 local steps (``LOCAL_STEPS``): λ_B and s^k_B cross the wire whatever τ, and at the
            # default 10 each VIMADMM job cost 3.3 CPU-s against 1.4-1.5 (2 epochs, 2026-11-29)
            ("vimadmm", {"local_steps": 2}),
            ("vimadmm_j", {"local_steps": 2}),
            ("apfed_r", {}),
            ("apfed_c", {}),
        ],
    )
    def test_every_algorithm_is_probed_on_its_own_tensors(
        self,
        one_torch_thread: None,
        algorithm: str,
        options: dict[str, Any],
        pki: Pki,
        cancer_data: Path,
        tmp_path: Path,
    ) -> None:
        """Each algorithm's recording holds the tensors ``PROBED`` names, and every probe gives a figure from them."""
        # 2 epochs, not 3: the probes need recorded epochs, not a trained model (the eight jobs: ~18 -> ~11 CPU-s)
        job = replace(
            CANCER_JOB, job_id=f"cancer-{algorithm}", algorithm=algorithm, epochs=2, algorithm_options=options
        )
        running, parties = _run_recorded(pki, cancer_data, tmp_path, job)
        party = parties[2]
        assert party.table is not None and party.job is not None
        recording = Recording(tmp_path / "rec-2")
        assert PROBED[algorithm].answer in recording.names(RECEIVED)
        assert PROBED[algorithm].upload in recording.names(SENT)
        labels = np.asarray(running.active.table.labels)
        figures = probe(tmp_path / "rec-2", party.job, party.table.features, labels, seed=0)
        print(algorithm, {k: round(v, 3) for k, v in figures.items()})
        has_residual = PROBED[algorithm].residual is not None
        assert not [k for k, v in figures.items() if math.isnan(v) and (has_residual or not k.startswith("residual_"))]
        if (
            PROBED[algorithm].upload == EMBEDDING
        ):  # APFed's upload is a gradient, which a linear decoder does not invert
            assert figures["inversion_mse"] < figures["inversion_baseline_mse"]
        # Every answer that comes down is a function of the labels, ADMM's dual λ included (measured
        # after 3 epochs: direction k = 10 at 0.95 to 1.00; after the 2 here, 2026-11-29: 1.000 for the
        # SplitNN family and VIMADMM(-J) at τ = 2, 0.966 APFed-R, 0.969 APFed-C; after 1 epoch APFed-C
        # read 0.865, too near the bar; async is left out, its arrival order varies).
        if algorithm != "async":
            assert figures["direction_auc_k10"] >= 0.85, (algorithm, figures)

    def test_multi_class_direction_attack_and_completion(
        self, one_torch_thread: None, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """Ten digit classes: no norm attack (NaN); the direction attack's macro AUC and completion's accuracy far
        above chance (0.5 and 0.1)."""
        job = replace(SMALL_JOB, job_id="digits-probe", epochs=1)  # 1 epoch: the same figures as 2 (below)
        running, parties = _run_recorded(pki, digits_data, tmp_path, job)
        party = parties[2]
        assert party.table is not None and party.job is not None
        labels = np.asarray(running.active.table.labels)
        figures = probe(tmp_path / "rec-2", party.job, party.table.features, labels, seed=0)
        print({k: round(v, 3) for k, v in figures.items()})
        assert math.isnan(figures["norm_auc"])
        # Measured after 2 epochs: direction macro AUC 0.989 (k = 1), 0.997 (k = 10); completion accuracy
        # 0.60 at 5 %. After the 1 epoch here (2026-11-29): 0.991, 0.998 and 0.56.
        assert figures["direction_auc_k1"] >= 0.9
        assert figures["completion_5pct"] >= 0.4


#: Each defence, as a job's ``[privacy]`` asks for it, and the probe figures it must bring down.
#: Measured (party 2, last epoch): undefended norm 0.809, direction k=1 1.000, k=10 1.000, inversion
#: R² 0.719; Marvell 0.05: norm 0.529, direction 0.509; label DP ε=1: direction 0.720 / 0.708;
#: embedding noise z=1, C=1: inversion R² 0.005. (Marvell at 0.25 left the norm attack at 0.78 here:
#: its bound on the classes' KL caps, but does not remove, what a single statistic can separate.)
DEFENCES: dict[str, tuple[PrivacySpec, tuple[str, ...]]] = {
    "marvell": (PrivacySpec(label_defence="marvell", marvell_sum_kl=0.05), ("norm_auc", "direction_auc_k1")),
    "marvell_full": (
        PrivacySpec(label_defence="marvell_full", marvell_sum_kl=0.05),
        ("norm_auc", "direction_auc_k1", "abs_direction_auc_k1", "strongest_auc_run"),
    ),
    "marvell_full_persistent": (
        PrivacySpec(label_defence="marvell_full", marvell_sum_kl=0.05, noise_persistence=0.75),
        ("norm_auc", "direction_auc_k1", "abs_direction_auc_k1", "strongest_auc_run"),
    ),
    "label_dp": (PrivacySpec(label_dp_epsilon=1.0), ("direction_auc_k1", "direction_auc_k10")),
    "embedding_noise": (PrivacySpec(embedding_clip=1.0, embedding_noise_multiplier=1.0), ("inversion_r2",)),
}


#: ``marvell_full`` at sum-KL 0.05 on this job: the strongest attack over the run, as documented in
#: docs/explanation/privacy.md; each bound is the mean plus 3 standard deviations over seeds 0-2 (each job also
#: draws its noise from a fresh key, so a seed's figure varies too), measured 2026-11-29 with the
#: job-level floor: 0.635, 0.592 and 0.619 (mean 0.615, sd 0.022). Marvell at the same sum-KL read
#: 0.776, 0.667 and 0.733 (before the job-level floor).
MARVELL_FULL_STRONGEST = 0.69
#: The same with ``noise_persistence = 0.75`` (a row's noise mostly the same every epoch, so the
#: average over epochs keeps it): 0.574, 0.564 and 0.609 (mean 0.582, sd 0.024).
MARVELL_FULL_PERSISTENT_STRONGEST = 0.66


class TestEachDefenceLowersItsAttack:
    def test_the_defended_jobs_leak_less_than_the_undefended_one(
        self, one_torch_thread: None, undefended: Undefended, pki: Pki, cancer_data: Path, tmp_path: Path
    ) -> None:
        """The undefended job and one job per defence, same data and seeds: each defence lowers its attacks' figures.

        The label attacks are scored against the TRUE labels, so randomised response counts as
        protection only as far as it hides them.
        """
        figures: dict[str, dict[str, float]] = {"none": undefended.figures}
        for name, privacy in {k: v[0] for k, v in DEFENCES.items()}.items():
            job = replace(CANCER_JOB, job_id=f"cancer-{name.replace('_', '-')}", privacy=privacy)
            running, parties = _run_recorded(pki, cancer_data, tmp_path / name, job)
            party = parties[2]
            assert party.table is not None
            labels = np.asarray(running.active.table.labels)
            figures[name] = probe(tmp_path / name / "rec-2", party.job or job, party.table.features, labels, seed=0)
        print({name: {k: round(v, 3) for k, v in f.items() if not math.isnan(v)} for name, f in figures.items()})
        assert figures["marvell_full"]["strongest_auc_run"] <= MARVELL_FULL_STRONGEST, figures["marvell_full"]
        persistent = figures["marvell_full_persistent"]
        assert persistent["strongest_auc_run"] <= MARVELL_FULL_PERSISTENT_STRONGEST, persistent
        for name, (_, attacks) in DEFENCES.items():
            for attack in attacks:
                assert figures[name][attack] < figures["none"][attack] - 0.1, (
                    name,
                    attack,
                    figures[name],
                    figures["none"],
                )


#: Issue 38's defences for what is not a gradient, each against the attacks on what it protects:
#: VIMADMM's λ_B and s^k_B under the label defence, APFed-C's h^A under the active party's noise.
NEW_DEFENCES: dict[str, tuple[str, PrivacySpec, tuple[str, ...]]] = {
    "admm": (
        "vimadmm",
        PrivacySpec(label_defence="marvell", marvell_sum_kl=0.05),
        ("direction_auc_k1", "residual_direction_auc_k1_max"),
    ),
    "apfed": (
        "apfed_c",
        PrivacySpec(active_embedding_clip=1.0, active_embedding_noise_multiplier=2.0),
        ("direction_auc_k1", "direction_auc_k10"),
    ),
}


#: The epochs of ``TestDefencesBeyondTheGradient``'s jobs, not ``CANCER_JOB``'s 8, the same for the undefended
#: and the defended job (the comparison stays like for like). Measured side by side (2026-11-29), undefended
#: then defended: VIMADMM at 8 epochs direction 1.000 then 0.557 and on s^k_B 0.870 then 0.572; at 4,
#: 1.000 then 0.581 and 0.870 then 0.572. APFed-C at 8: k = 1 0.976 then 0.533, k = 10 0.981 then 0.570;
#: at 4: 0.969 then 0.579, 0.967 then 0.593. Every fall stays 0.29 or more against the 0.1 asked, and the
#: four jobs cost about half (the VIMADMM pair took 30 s of wall time at 8 epochs). VIMADMM at 2 epochs
#: (three runs, 2026-11-29; the defence draws its noise from a fresh key): direction 1.000 then 0.507-0.587,
#: on s^k_B 0.852 then 0.538-0.609, falls of 0.24 or more; about 2 CPU-s less than at 4. APFed-C stays at 4:
#: at 2 its undefended k = 1 read 0.667 and a defended run fell only 0.086.
BEYOND_EPOCHS = {"admm": 2, "apfed": 4}

#: VIMADMM's local steps per batch (τ), 2 rather than the default 10: the label defence acts on λ_B and
#: s^k_B whatever τ, and at 10 the two VIMADMM jobs took 28 % longer. Measured side by side (2026-11-29),
#: undefended then defended: at τ = 2, direction 1.000 then 0.580 and on s^k_B 0.870 then 0.608; at
#: τ = 10, 1.000 then 0.560 and 0.938 then 0.557. Each fall stays well past the 0.1 asked.
LOCAL_STEPS = {"vimadmm": {"local_steps": 2}}


class TestDefencesBeyondTheGradient:
    @pytest.mark.parametrize("name", sorted(NEW_DEFENCES))
    def test_the_defence_lowers_the_attack_on_what_it_protects(
        self, name: str, one_torch_thread: None, pki: Pki, cancer_data: Path, tmp_path: Path
    ) -> None:
        """Undefended and defended, same data and seeds, over mTLS: the attacks on the received tensors fall by 0.1+.

        VIMADMM: the direction attack (k = 1) on λ_B and, on its own, on the residual s^k_B, as
        received (its most telling epoch: undefended, s^k_B leaks most early, 0.64 at the last of 8
        epochs). APFed-C: the direction attacks on h^A as received.
        """
        algorithm, privacy, attacked = NEW_DEFENCES[name]
        figures: dict[str, dict[str, float]] = {}
        for setting, spec in (("none", PrivacySpec()), (name, privacy)):
            job = replace(
                CANCER_JOB,
                job_id=f"cancer-{name}-{setting}",
                epochs=BEYOND_EPOCHS[name],
                algorithm=algorithm,
                privacy=spec,
                algorithm_options=LOCAL_STEPS.get(algorithm, {}),
            )
            running, parties = _run_recorded(pki, cancer_data, tmp_path / setting, job)
            party = parties[2]
            assert party.table is not None
            labels = np.asarray(running.active.table.labels)
            recorded = tmp_path / setting / "rec-2"
            figures[setting] = probe(recorded, party.job or job, party.table.features, labels, seed=0)
        print(name, {s: {k: round(figures[s][k], 3) for k in attacked} for s in figures})
        for attack in attacked:
            assert figures[name][attack] < figures["none"][attack] - 0.1, (attack, figures[name], figures["none"])
