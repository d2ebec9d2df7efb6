"""The attack probes on small synthetic arrays whose answer is known, and the link recorder's files."""

from __future__ import annotations

import math
import stat
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from vflalgorithms.splitnn.overlap import part_bounds
from vflcore.errors import VflError
from vflcore.job.spec import JobSpec
from vflcore.wire.links import TensorExchange, TrainingLink
from vflcore.wire.tensors import TensorKey
from vflprivacy.attacks import (
    direction_attack,
    inversion,
    leak_auc,
    minority,
    model_completion,
    norm_attack,
    roc_auc,
)
from vflprivacy.recording import RECEIVED, SENT, LinkRecorder, Recording, RecordingLink
from vfltesting.privacy_probe import per_epoch_rows


def _binary(n: int = 400, positive_share: float = 0.2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random(n) < positive_share).astype(np.int64)


def _class_directions(labels: np.ndarray, dim: int = 8, noise: float = 0.3, seed: int = 1) -> np.ndarray:
    """Gradients whose direction is the class's (plus noise), with norms that say nothing about the class."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(int(labels.max()) + 1, dim))
    rows = centres[labels] + noise * rng.normal(size=(len(labels), dim))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * rng.uniform(0.5, 1.5, size=(len(labels), 1))


class TestLeakAuc:
    def test_a_reversed_ranking_leaks_as_much(self) -> None:
        """A score that ranks the negatives first leaks as much as one that ranks the positives first."""
        positive = np.array([False, False, True, True])
        assert leak_auc(np.array([0.0, 1.0, 2.0, 3.0]), positive) == 1.0
        assert leak_auc(np.array([3.0, 2.0, 1.0, 0.0]), positive) == 1.0

    def test_one_class_is_nan(self) -> None:
        """With one class there is nothing to rank: NaN, not a number that looks like a result."""
        assert math.isnan(leak_auc(np.arange(3.0), np.ones(3, dtype=bool)))

    @pytest.mark.parametrize("seed", range(5))
    def test_it_is_scikit_learns_roc_auc(self, seed: int) -> None:
        """The rank statistic gives ``roc_auc_score``'s figure, tied scores included (a third of them rounded)."""
        rng = np.random.default_rng(seed)
        positive = rng.random(455) < 0.1 + 0.2 * seed
        scores = rng.normal(size=455) + positive * rng.uniform(0, 2)
        scores[: 150 + seed] = np.round(scores[: 150 + seed], 1)
        assert roc_auc(positive, scores) == pytest.approx(roc_auc_score(positive, scores), abs=1e-12)
        assert leak_auc(-scores, positive) == pytest.approx(leak_auc(scores, positive), abs=1e-12)

    def test_nan_scores_are_refused(self) -> None:
        """As ``roc_auc_score`` does: a NaN score is an error upstream, not a figure."""
        with pytest.raises(ValueError, match="NaN"):
            roc_auc(np.array([True, False]), np.array([np.nan, 1.0]))

    def test_minority_is_the_rarer_class(self) -> None:
        """The minority rows are those of the rarer label, whichever number it has."""
        assert minority(np.array([1, 1, 1, 0])).tolist() == [False, False, False, True]


class TestNormAttack:
    def test_larger_norms_for_the_rare_class_leak(self) -> None:
        """Rows of the rare class with twice the norm are found: AUC near 1."""
        labels = _binary()
        rng = np.random.default_rng(2)
        gradients = rng.normal(size=(len(labels), 4)) * np.where(labels == 1, 3.0, 1.0)[:, None]
        assert norm_attack(gradients, labels) > 0.9

    def test_norms_unrelated_to_the_label_do_not(self) -> None:
        """Random gradients give about 0.5."""
        labels = _binary()
        gradients = np.random.default_rng(3).normal(size=(len(labels), 4))
        assert norm_attack(gradients, labels) < 0.6

    def test_multi_class_is_not_defined(self) -> None:
        """A ranking splits two classes only: NaN for three."""
        labels = np.arange(30) % 3
        assert math.isnan(norm_attack(np.ones((30, 2)), labels))


class TestDirectionAttack:
    @pytest.mark.parametrize("known", [1, 10])
    def test_directions_that_encode_the_label_give_it_away(self, known: int) -> None:
        """Gradients pointing one way per class: AUC near 1 from one known row or ten."""
        labels = _binary()
        assert direction_attack(_class_directions(labels), labels, known, seed=0) > 0.95

    @pytest.mark.parametrize("known", [1, 10])
    def test_random_gradients_give_half(self, known: int) -> None:
        """Directions unrelated to the label: about 0.5."""
        labels = _binary()
        gradients = np.random.default_rng(4).normal(size=(len(labels), 8))
        assert abs(direction_attack(gradients, labels, known, seed=0) - 0.5) < 0.1

    def test_opposite_directions_with_one_known_row_of_either_class(self) -> None:
        """One known row of either class orients the score: the AUC is near 1 for every draw."""
        labels = _binary(200)
        gradients = np.where(labels[:, None] == 1, 1.0, -1.0) * np.ones((200, 3))
        gradients += np.random.default_rng(5).normal(scale=0.5, size=gradients.shape)
        assert min(direction_attack(gradients, labels, 1, seed=s) for s in range(6)) > 0.95

    def test_multi_class_macro_auc(self) -> None:
        """Four classes, each its own direction: the macro one-vs-rest AUC is near 1; random: near 0.5."""
        labels = np.random.default_rng(6).integers(0, 4, size=400)
        assert direction_attack(_class_directions(labels), labels, 1, seed=0) > 0.9
        noise = np.random.default_rng(7).normal(size=(400, 8))
        assert abs(direction_attack(noise, labels, 10, seed=0) - 0.5) < 0.1

    def test_same_seed_same_figure(self) -> None:
        """The known rows are drawn from the seed: the same seed gives the same AUC."""
        labels = _binary()
        gradients = np.random.default_rng(8).normal(size=(len(labels), 8)) + labels[:, None] * 0.2
        assert direction_attack(gradients, labels, 10, seed=3) == direction_attack(gradients, labels, 10, seed=3)


class TestModelCompletion:
    def test_embeddings_that_separate_the_classes_beat_raw_noise(self) -> None:
        """Embeddings that encode the label complete to AUC near 1; raw features that do not, to about 0.5."""
        labels = _binary(500, 0.3)
        embeddings = _class_directions(labels, dim=6, noise=0.5)
        raw = np.random.default_rng(9).normal(size=(500, 5))
        done = model_completion(embeddings, raw, labels, 0.05, seed=0)
        assert done.federated > 0.9
        assert abs(done.raw - 0.5) < 0.15

    def test_one_percent_still_holds_both_classes(self) -> None:
        """1 % of 300 rows is 3: at least one of each class is labelled, so a figure comes out."""
        labels = _binary(300, 0.1)
        done = model_completion(_class_directions(labels), np.ones((300, 2)), labels, 0.01, seed=1)
        assert not math.isnan(done.federated)

    def test_multi_class_reports_accuracy(self) -> None:
        """Three classes: accuracy, near 1 where the embeddings separate them."""
        labels = np.arange(300) % 3
        done = model_completion(_class_directions(labels, noise=0.1), np.zeros((300, 2)), labels, 0.05, seed=0)
        assert done.federated > 0.9
        assert done.raw < 0.5


class TestInversion:
    def test_features_linearly_encoded_are_recovered(self) -> None:
        """Embeddings linear in the features (plus a little noise): R² near 1, error far below the mean's."""
        rng = np.random.default_rng(10)
        features = rng.normal(size=(400, 5)) * [1, 10, 100, 0.1, 3]
        embeddings = features @ rng.normal(size=(5, 8)) + 0.001 * rng.normal(size=(400, 8))
        found = inversion(embeddings, features, 0.1, seed=0)
        assert found.mean_r2 > 0.95
        assert found.r2.shape == (5,)
        assert found.mse < 0.1 * found.baseline_mse

    def test_unrelated_embeddings_recover_nothing(self) -> None:
        """Embeddings independent of the features do no better than the mean: R² about 0 or below."""
        rng = np.random.default_rng(11)
        found = inversion(rng.normal(size=(400, 8)), rng.normal(size=(400, 4)), 0.1, seed=0)
        assert found.mean_r2 < 0.05
        assert found.mse > 0.9 * found.baseline_mse


class _Memory(TrainingLink):
    """A link that answers each upload with its negation: the recorder's wrapped link in these tests."""

    def __init__(self) -> None:
        self.sent: dict[TensorKey, np.ndarray] = {}

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        self.sent[key] = array

    def receive(self, key: TensorKey) -> np.ndarray:
        return -self.sent[key.with_name("up")]

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        link = self

        class Round(TensorExchange):
            def send(self, batch: int, array: np.ndarray) -> None:
                link.sent[TensorKey(job_id, round_, batch, up)] = array

            def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
                names = (down,) if isinstance(down, str) else down
                return {n: -link.sent[TensorKey(job_id, round_, batch, up)] for n in names}

            def close(self) -> None:
                pass

            def cancel(self) -> None:
                pass

        return Round()


class TestRecordingLink:
    def test_what_crosses_is_recorded_and_passed_on(self, tmp_path: Path) -> None:
        """Uploads and answers of a round, and single sends, are passed on unchanged and read back by key."""
        inner = _Memory()
        link = RecordingLink(inner, LinkRecorder(tmp_path / "rec"))
        up = np.arange(6, dtype=np.float32).reshape(3, 2)
        with link.exchange("j", 4, 2, up="up", down=("admm/dual", "grad")) as exchange:
            exchange.send(1, up)
            assert np.array_equal(exchange.receive_bundle(1)["grad"], -up)
        link.send(TensorKey("j", 0, 0, "warmup/embedding"), up)
        assert np.array_equal(inner.sent[TensorKey("j", 4, 1, "up")], up)
        recording = Recording(tmp_path / "rec")
        assert np.array_equal(recording.tensors(SENT, "up")[(4, 1)], up)
        assert np.array_equal(recording.tensors(RECEIVED, "admm/dual")[(4, 1)], -up)
        assert recording.names(SENT) == {"up", "warmup/embedding"}
        assert recording.names(RECEIVED) == {"admm/dual", "grad"}

    def test_files_are_the_owners_alone_and_hold_no_pickle(self, tmp_path: Path) -> None:
        """Every recorded file is mode 0600 and loads with pickle refused."""
        recorder = LinkRecorder(tmp_path / "rec")
        recorder.record(SENT, TensorKey("j", 0, 0, "embedding"), np.ones((2, 2), dtype=np.float32))
        recorder.record_trained(lambda rows: np.zeros((len(rows), 3)), 5)
        files = [p for p in (tmp_path / "rec").rglob("*") if p.is_file()]
        assert len(files) == 3
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
        assert Recording(tmp_path / "rec").embeddings().shape == (5, 3)  # type: ignore[union-attr]
        assert Recording(tmp_path / "rec").aligned_rows() == 5

    def test_a_party_without_a_representation_records_the_row_count(self, tmp_path: Path) -> None:
        """APFed's passive party has no representation: no embeddings, but the row count."""

        def refuse(rows: np.ndarray) -> np.ndarray:
            raise VflError("the active party predicts alone")

        LinkRecorder(tmp_path).record_trained(refuse, 7)
        assert Recording(tmp_path).embeddings() is None
        assert Recording(tmp_path).aligned_rows() == 7


class TestPerEpochRows:
    @pytest.mark.parametrize("parts", [1, 3])
    def test_wire_batches_map_back_to_their_rows(self, parts: int, tmp_path: Path) -> None:
        """Each recorded part of a batch lands on the rows the schedule gave it, with or without micro-batches."""

        job = JobSpec("j", batch_size=10, num_rows=47, algorithm_options={"micro_batches": parts})
        recorder = LinkRecorder(tmp_path)
        for epoch in (0, 1):
            wire = 0
            for batch in job.schedule().batches(epoch):
                for start, stop in part_bounds(len(batch), parts):  # how the party cuts a batch
                    recorder.record(SENT, TensorKey("j", epoch, wire, "embedding"), batch[start:stop, None] * 1.0)
                    wire += 1
        found = per_epoch_rows(Recording(tmp_path), SENT, "embedding", job)
        assert sorted(found) == [0, 1]
        for rows, values in found.values():
            assert np.array_equal(values[:, 0], rows)
            assert sorted(rows.tolist()) == sorted(job.schedule().train_rows.tolist())

    def test_a_recording_of_another_job_is_refused(self, tmp_path: Path) -> None:
        """A tensor whose row count does not fit the job's batch is an error naming it, not a silent gap."""
        job = JobSpec("j", batch_size=10, num_rows=47)
        LinkRecorder(tmp_path).record(SENT, TensorKey("j", 0, 0, "embedding"), np.zeros((7, 2)))
        with pytest.raises(ValueError, match="7 rows"):
            per_epoch_rows(Recording(tmp_path), SENT, "embedding", job)
