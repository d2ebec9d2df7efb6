"""Which jobs may ask for label protection, and what the active party trains on when they do.

A label defence perturbs the per-row tensors computed from the labels that the passive parties
are sent (gradients; VIMADMM's λ_B and s_B); an algorithm that sends none (the active party's
embedding, extractor weights) cannot take one, and a job that asks is refused at submission,
naming the key, the algorithm and what does protect it. Marvell separates two classes: a job on
more classes is refused as soon as the labels are read. Randomised-response label DP applies to
every algorithm; APFed's h^A takes the active party's embedding noise, and no other algorithm does.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch

from vflalgorithms.registry import algorithms
from vflcore.data.tables import PartyTable
from vflcore.errors import ConfigError
from vflcore.job.privacy import PrivacySpec, privacy_keys
from vflcore.job.spec import JobSpec
from vflprivacy.label_defences import keep_probability
from vflprivacy.noise import KEY_FILE
from vflserver.plan.admission import check_models
from vflserver.plan.document import plan_from_document
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
from vflserver.training.training_labels import labels_to_train_on
from vfltesting.paths import REPO_ROOT

#: The algorithms whose passive parties are sent per-row tensors computed from the labels (∂L/∂h, or
#: λ_B and s_B): the ones a label defence applies to.
SENDS_GRADIENTS = {"splitnn", "fedbcd", "async", "vimsgd", "vimadmm", "vimadmm_j"}
#: What each of the others' refusal names instead.
INSTEAD = {
    "apfed_r": "active_embedding_clip",
    "apfed_c": "active_embedding_clip",
    "adptvfedconv": "label_dp_epsilon",
}


def _plan(algorithm: str, privacy: dict[str, object]) -> JobPlan:
    return plan_from_document({"job": {"algorithm": algorithm}, "privacy": privacy}, default_join_timeout_s=1)


def _table(tmp_path: Path, classes: int, rows: int = 60) -> PartyTable:
    labels = (np.arange(rows) % classes).astype(np.float64)
    ids = np.array([f"u{i}" for i in range(rows)])
    return PartyTable(ids, np.zeros((rows, 2), np.float32), ("a", "b"), labels, tmp_path / "party1.csv")


class TestSubmission:
    @pytest.mark.parametrize("algorithm", sorted(algorithms()))
    @pytest.mark.parametrize("defence", ["marvell", "marvell_full", "max_norm", "gaussian"])
    def test_a_label_defence_is_refused_where_no_gradient_is_sent(self, algorithm: str, defence: str) -> None:
        """Accepted for the algorithms that send gradients; refused for the others, naming the key and the algorithm."""
        if algorithm in SENDS_GRADIENTS:
            _plan(algorithm, {"label_defence": defence})
            return
        with pytest.raises(
            ConfigError, match=rf"\[privacy\] label_defence = '{defence}': {algorithm} sends"
        ) as refused:
            _plan(algorithm, {"label_defence": defence})
        assert INSTEAD.get(algorithm, "label_dp_epsilon") in str(refused.value)

    @pytest.mark.parametrize("algorithm", sorted(algorithms()))
    def test_the_active_embedding_defence_is_for_apfed_only(self, algorithm: str) -> None:
        """active_embedding_clip clips what the active party sends of its own: only APFed sends any."""
        privacy = {"active_embedding_clip": 1.0, "active_embedding_noise_multiplier": 0.5}
        if algorithm.startswith("apfed"):
            assert _plan(algorithm, privacy).job.privacy.protects_active_embedding
            return
        with pytest.raises(ConfigError, match=rf"active_embedding_clip = 1: {algorithm} sends the passive parties no"):
            _plan(algorithm, privacy)

    def test_active_embedding_noise_needs_a_clip(self) -> None:
        with pytest.raises(ConfigError, match=r"active_embedding_noise_multiplier needs active_embedding_clip > 0"):
            _plan("apfed_c", {"active_embedding_noise_multiplier": 1.0})

    @pytest.mark.parametrize("algorithm", sorted(algorithms()))
    def test_label_dp_is_accepted_by_every_algorithm(self, algorithm: str) -> None:
        """Randomised response changes only what the active party trains on: any algorithm can take it."""
        assert _plan(algorithm, {"label_dp_epsilon": 1.0}).job.privacy.label_dp_epsilon == 1.0

    def test_marvell_on_ten_classes_is_refused_when_the_labels_are_read(self, tmp_path: Path) -> None:
        """At submission (the table is read for it), and by the active party itself, naming the key."""
        plan = plan_from_document(
            {"job": {"algorithm": "splitnn"}, "privacy": {"label_defence": "marvell"}}, default_join_timeout_s=1
        )
        with pytest.raises(ConfigError, match=r"\[privacy\] label_defence = 'marvell'.* 10 classes"):
            check_models(plan, _table(tmp_path, 10))
        check_models(plan, _table(tmp_path, 2))
        with pytest.raises(ConfigError, match=r"party1\.csv: \[privacy\] label_defence = 'marvell'.* 10 classes"):
            ActiveParty(plan, _table(tmp_path, 10))

    def test_a_plan_made_in_code_is_checked_when_it_is_made(self) -> None:
        """A job built in code, not from a document, is checked as its plan is made: before any party has it."""
        job = JobSpec("j", algorithm="apfed_c", privacy=PrivacySpec(label_defence="gaussian"))
        with pytest.raises(ConfigError, match=r"\[privacy\] label_defence = 'gaussian': apfed_c"):
            JobPlan(job)


class TestTrainingLabels:
    """``labels_to_train_on``: the labels the active half trains on, and the key, in the party's job folder."""

    def test_no_protection_leaves_the_labels_and_makes_no_key(self, tmp_path: Path) -> None:
        labels = torch.arange(100) % 2
        found = labels_to_train_on(JobSpec("j", num_outputs=2), labels, np.arange(80), tmp_path)
        assert found.labels is labels and found.key is None and not (tmp_path / KEY_FILE).exists()

    def test_label_dp_randomises_the_training_rows_only_and_the_same_way_again(self, tmp_path: Path) -> None:
        """Held-out rows keep their labels; training rows are kept at the stated rate; the same key gives the same."""
        labels = torch.from_numpy(np.random.default_rng(0).integers(0, 2, 4000))
        train, held_out = np.arange(3000), np.arange(3000, 4000)
        job = JobSpec("j", num_outputs=2, privacy=PrivacySpec(label_dp_epsilon=0.5))
        first = labels_to_train_on(job, labels, train, tmp_path)
        assert torch.equal(first.labels[held_out], labels[held_out])
        kept = int((first.labels[train] == labels[train]).sum())
        p = keep_probability(0.5, 2)
        assert abs(kept - 3000 * p) < 5 * np.sqrt(3000 * p * (1 - p))
        assert first.key is not None and (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
        again = labels_to_train_on(job, labels, train, tmp_path)
        assert torch.equal(again.labels, first.labels) and again.key == first.key
        flipped = 3000 - kept
        assert first.report["label_dp"] == {
            "epsilon": 0.5,
            "classes": 2,
            "keep_probability": p,
            "flipped": flipped,
            "training_rows": 3000,
        }

    def test_a_draw_that_flips_nothing_says_so(self, tmp_path: Path) -> None:
        """ε = 12 on 100 rows keeps every label (each with probability 1 - 6e-6): the report says so."""
        labels = torch.arange(100) % 2
        job = JobSpec("j", num_outputs=2, privacy=PrivacySpec(label_dp_epsilon=12.0))
        found = labels_to_train_on(job, labels, np.arange(100), tmp_path)
        assert torch.equal(found.labels, labels)
        assert found.report["label_dp"]["flipped"] == 0
        assert found.report["label_dp"]["note"].startswith("no training label was flipped")

    def test_a_gradient_defence_alone_keeps_the_labels_but_makes_the_key(self, tmp_path: Path) -> None:
        labels = torch.arange(100) % 2
        job = JobSpec("j", num_outputs=2, privacy=PrivacySpec(label_defence="marvell"))
        found = labels_to_train_on(job, labels, np.arange(80), tmp_path)
        assert torch.equal(found.labels, labels) and found.key is not None
        assert "label_dp" not in found.report and found.report["label_defence"] == "marvell"


class TestDocumented:
    def test_every_privacy_key_is_documented_with_its_default(self) -> None:
        """The configuration reference's ``[privacy]`` lists every ``PrivacySpec`` key and its default, and no other."""
        text = (REPO_ROOT / "docs/reference/configuration.md").read_text()
        section = text[text.index("### `[privacy]`") :]
        section = section[: section.index("\n### ", 1)]
        rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| ([^|]*) \|", section, flags=re.M))
        assert set(rows) == set(privacy_keys())
        for spec in fields(PrivacySpec):
            shown = re.match(r"`([^`]*)`", rows[spec.name])
            assert shown is not None, spec.name
            value = shown.group(1)
            if isinstance(spec.default, str):
                assert value == f'"{spec.default}"', spec.name
            else:
                assert float(value) == spec.default, spec.name
