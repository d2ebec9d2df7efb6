"""Tests for vflcore.ml.metrics: classification and regression task metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vflcore.ml.metrics import classification_metrics, predict_classes, regression_metrics, roc_auc, task_metrics


class TestClassificationMetrics:
    def test_perfect_predictions(self) -> None:
        """Logits whose argmax matches every label score 1.0 on every metric."""
        logits = np.eye(3)[[0, 1, 2, 1]]
        result = classification_metrics(np.array([0, 1, 2, 1]), logits)
        assert result == {"accuracy": 1.0, "macro_f1": 1.0, "precision": 1.0, "recall": 1.0}

    def test_macro_averages(self) -> None:
        """Macro precision/recall/F1 average classes equally, and float labels are accepted."""
        y_true = np.array([0.0, 0.0, 1.0, 1.0])
        logits = np.array([[1, 0], [1, 0], [1, 0], [0, 1]], dtype=np.float32)
        result = classification_metrics(y_true, logits)
        assert result["accuracy"] == pytest.approx(0.75)
        assert result["precision"] == pytest.approx((2 / 3 + 1) / 2)
        assert result["recall"] == pytest.approx((1 + 0.5) / 2)
        assert result["macro_f1"] == pytest.approx((0.8 + 2 / 3) / 2)
        assert all(isinstance(v, float) for v in result.values())

    def test_never_predicted_class_scores_zero_without_warning(self) -> None:
        """A class never predicted counts as zero precision instead of raising a warning."""
        result = classification_metrics(np.array([0, 1]), np.array([[1.0, 0.0], [1.0, 0.0]]))
        assert result["precision"] == pytest.approx(0.25)

    def test_mismatched_lengths(self) -> None:
        """Label and prediction counts must agree."""
        with pytest.raises(ValueError, match="3 labels but 2 predictions"):
            classification_metrics(np.array([0, 1, 1]), np.eye(2))

    def test_no_rows(self) -> None:
        """Scoring nothing is an error rather than a warning."""
        with pytest.raises(ValueError, match="no rows to score"):
            classification_metrics(np.zeros(0), np.zeros((0, 2)))

    def test_binary_roc_auc_ranks_by_the_positive_logit(self) -> None:
        """A binary task's ROC AUC ranks rows by logit 1 minus logit 0 (or the single logit), not by the argmax."""
        labels = np.array([0, 0, 1, 1])
        # Every row predicts class 0, yet the positives rank above the negatives except one pair.
        logits = np.array([[3.0, 0.0], [1.0, 0.5], [2.0, 1.0], [3.0, 2.6]])
        assert classification_metrics(labels, logits)["roc_auc"] == pytest.approx(0.75)
        single = logits[:, 1:] - logits[:, :1]
        assert classification_metrics(labels, single)["roc_auc"] == pytest.approx(0.75)

    def test_no_roc_auc_without_both_classes_or_with_more_outputs(self) -> None:
        """One class in the test set, or a multi-class model, gives no ROC AUC rather than an error."""
        assert "roc_auc" not in classification_metrics(np.array([1, 1]), np.array([[0.0, 1.0], [1.0, 0.0]]))
        assert "roc_auc" not in classification_metrics(np.array([0, 1, 1]), np.eye(3))


class TestPredictClasses:
    def test_single_logit_thresholds_at_zero(self) -> None:
        """A single binary logit predicts class 1 when positive, in 1-D or (n, 1) form."""
        np.testing.assert_array_equal(predict_classes(np.array([-1.0, 2.0])), [0, 1])
        np.testing.assert_array_equal(predict_classes(np.array([[0.5], [-0.5]])), [1, 0])

    def test_rejects_3d(self) -> None:
        """Logits with more than two dimensions are rejected."""
        with pytest.raises(ValueError, match="logits must be"):
            predict_classes(np.zeros((2, 2, 2)))


class TestRegressionMetrics:
    def test_mse_and_r2(self) -> None:
        """MSE and R² match their definitions, and (n, 1) predictions are flattened."""
        y = np.array([1.0, 2.0, 3.0, 4.0])
        pred = np.array([[1.5], [2.0], [2.5], [4.0]], dtype=np.float32)
        result = regression_metrics(y, pred)
        assert result["mse"] == pytest.approx(0.125)
        assert result["r2"] == pytest.approx(1 - 0.5 / 5.0)

    def test_single_sample_r2_is_nan(self) -> None:
        """With one sample R² is undefined and reported as NaN, without a warning."""
        result = regression_metrics(np.array([1.0]), np.array([2.0]))
        assert result["mse"] == 1.0 and math.isnan(result["r2"])

    def test_mismatched_lengths(self) -> None:
        """Target and prediction counts must agree."""
        with pytest.raises(ValueError, match="2 targets but 3 predictions"):
            regression_metrics(np.zeros(2), np.zeros(3))


class TestTaskMetrics:
    def test_dispatches_by_task(self) -> None:
        """Each task name returns that task's metric keys."""
        assert set(task_metrics("classification", np.array([0, 1, 2]), np.eye(3))) == {
            "accuracy",
            "macro_f1",
            "precision",
            "recall",
        }
        assert set(task_metrics("regression", np.array([0.0, 1.0]), np.array([0.0, 1.0]))) == {"mse", "r2"}

    def test_unknown_task(self) -> None:
        """An unknown task is rejected with the choices."""
        with pytest.raises(ValueError, match="unknown task 'ranking'; choose one of classification, regression"):
            task_metrics("ranking", np.zeros(1), np.zeros(1))


class TestAgreesWithScikitLearn:
    """The numpy metrics give scikit-learn's figures (the daemons no longer import it)."""

    @pytest.mark.parametrize("seed", range(6))
    def test_classification(self, seed: int) -> None:
        """Random labels and logits, 2 to 5 classes, some never predicted or never true."""
        from sklearn import metrics as skm

        rng = np.random.default_rng(seed)
        classes = 2 + seed % 4
        truth = rng.integers(0, classes, size=60)
        logits = rng.normal(size=(60, classes)).round(1)  # rounded: ties among the scores
        logits[:, -1] -= 3 * (seed % 2)  # odd seeds: the last class is rarely or never predicted
        predicted = logits.argmax(axis=1)
        result = classification_metrics(truth, logits)
        expected = {
            "accuracy": skm.accuracy_score(truth, predicted),
            "macro_f1": skm.f1_score(truth, predicted, average="macro", zero_division=0),
            "precision": skm.precision_score(truth, predicted, average="macro", zero_division=0),
            "recall": skm.recall_score(truth, predicted, average="macro", zero_division=0),
        }
        if classes == 2:
            expected["roc_auc"] = skm.roc_auc_score(truth, logits[:, 1] - logits[:, 0])
        assert result == pytest.approx(expected, abs=1e-12)

    def test_roc_auc_with_many_ties(self) -> None:
        """Scores on a coarse grid (most rows tied) rank as sklearn ranks them."""
        from sklearn.metrics import roc_auc_score

        rng = np.random.default_rng(3)
        truth = rng.integers(0, 2, size=200)
        score = rng.integers(0, 4, size=200).astype(np.float64) + truth
        assert roc_auc(truth, score) == pytest.approx(roc_auc_score(truth, score), abs=1e-12)

    @pytest.mark.parametrize(
        ("truth", "predicted"),
        [
            (np.arange(8.0), np.arange(8.0)[::-1]),
            (np.full(5, 2.0), np.full(5, 2.0)),  # constant target, perfect: 1
            (np.full(5, 2.0), np.arange(5.0)),  # constant target, not perfect: 0
        ],
    )
    def test_regression(self, truth: np.ndarray, predicted: np.ndarray) -> None:
        from sklearn import metrics as skm

        result = regression_metrics(truth, predicted)
        assert result["mse"] == pytest.approx(skm.mean_squared_error(truth, predicted), abs=1e-12)
        assert result["r2"] == pytest.approx(skm.r2_score(truth, predicted), abs=1e-12)
