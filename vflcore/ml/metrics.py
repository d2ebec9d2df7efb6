"""Score a model's outputs with the task metrics the seed papers report.

Classification reports accuracy plus macro F1, precision and recall (macro, so that rare classes
count as much as common ones), and for a binary task ROC AUC: a threshold-free score that an
imbalanced test set cannot inflate, and the utility figure the privacy bench holds defences to.
Regression reports MSE and R². Values are plain floats so they
can go straight into logs and JSON.

Written with numpy, not scikit-learn, although the definitions are scikit-learn's (macro averages
over the labels seen in either array, zero for an empty denominator, R² of a constant target 1.0
or 0.0): importing sklearn cost every daemon about a second of start-up, which a server restart
pays before the job resumes. ``tests/unit/vflcore/ml/test_metrics.py`` checks every figure against sklearn.
"""

from __future__ import annotations

import numpy as np

from vflcore.job.spec import TASKS

__all__ = ["classification_metrics", "predict_classes", "regression_metrics", "roc_auc", "task_metrics"]


def classification_metrics(y_true: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """Accuracy and macro F1/precision/recall of argmax(logits) against integer labels; ROC AUC if binary.

    ROC AUC is reported when the labels are 0 and 1, both present, and the model has one or two
    outputs; a test set holding a single class has no ROC AUC, and gets none.

    A single logit column (or a 1-D array) is read as a binary logit, predicting class 1 above 0.
    """
    predicted = predict_classes(logits)
    truth = np.asarray(y_true).astype(np.int64).ravel()
    if truth.shape != predicted.shape:
        raise ValueError(f"{truth.shape[0]} labels but {predicted.shape[0]} predictions")
    if truth.size == 0:
        raise ValueError("no rows to score")
    precision, recall, f1 = _macro_scores(truth, predicted)
    metrics = {
        "accuracy": float(np.mean(truth == predicted)),
        "macro_f1": f1,
        "precision": precision,
        "recall": recall,
    }
    score = _positive_score(logits)
    if score is not None and np.unique(truth).size == 2 and set(np.unique(truth).tolist()) == {0, 1}:
        metrics["roc_auc"] = roc_auc(truth, score)
    return metrics


def _macro_scores(truth: np.ndarray, predicted: np.ndarray) -> tuple[float, float, float]:
    """Macro precision, recall and F1 over every label in either array; 0 where a denominator is 0."""
    labels = np.union1d(truth, predicted)
    hits = truth[truth == predicted]
    true_positives = np.array([np.count_nonzero(hits == label) for label in labels], dtype=np.float64)
    predicted_counts = np.array([np.count_nonzero(predicted == label) for label in labels], dtype=np.float64)
    true_counts = np.array([np.count_nonzero(truth == label) for label in labels], dtype=np.float64)
    precision = _ratio(true_positives, predicted_counts)
    recall = _ratio(true_positives, true_counts)
    f1 = _ratio(2 * true_positives, predicted_counts + true_counts)
    return float(precision.mean()), float(recall.mean()), float(f1.mean())


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    out = np.zeros_like(numerator)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def roc_auc(truth: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC of ``score`` for 0/1 labels: the Mann-Whitney U of the positives, ties counted half.

    Ranks are averaged over tied scores, so the figure is the probability that a random positive
    scores above a random negative, a tie counting one half (what ``sklearn.metrics.roc_auc_score``
    gives). Both classes must be present.
    """
    labels = np.asarray(truth).ravel()
    values = np.asarray(score, dtype=np.float64).ravel()
    positives = int(np.count_nonzero(labels == 1))
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        raise ValueError("ROC AUC needs both classes among the labels")
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    # each run of tied scores gets the mean of the ranks it spans (1-based)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    mean_ranks = (starts + ends + 1) / 2.0
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_ranks, ends - starts)
    u = ranks[labels == 1].sum() - positives * (positives + 1) / 2.0
    return float(u / (positives * negatives))


def _positive_score(logits: np.ndarray) -> np.ndarray | None:
    """A binary model's score for class 1 (any monotone one ranks the same), or None for more classes.

    Two logit columns give their difference (the log-odds softmax implies); one gives itself.
    """
    scores = np.asarray(logits, dtype=np.float64)
    if scores.ndim == 1 or (scores.ndim == 2 and scores.shape[1] == 1):
        return scores.reshape(-1)
    if scores.ndim == 2 and scores.shape[1] == 2:
        difference: np.ndarray = scores[:, 1] - scores[:, 0]
        return difference
    return None


def predict_classes(logits: np.ndarray) -> np.ndarray:
    """Class ids from logits: argmax over classes, or a threshold at 0 for a single binary logit."""
    scores = np.asarray(logits)
    if scores.ndim == 1 or (scores.ndim == 2 and scores.shape[1] == 1):
        return (scores.reshape(-1) > 0).astype(np.int64)
    if scores.ndim != 2:
        raise ValueError(f"logits must be 1-D or (rows, classes), got shape {scores.shape}")
    predicted: np.ndarray = np.argmax(scores, axis=1).astype(np.int64)
    return predicted


def regression_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Mean squared error and R² of predictions against targets.

    R² needs at least two samples; with fewer it is reported as NaN rather than warned about.
    """
    truth = np.asarray(y_true, dtype=np.float64).ravel()
    predicted = np.asarray(y_pred, dtype=np.float64).ravel()
    if truth.shape != predicted.shape:
        raise ValueError(f"{truth.shape[0]} targets but {predicted.shape[0]} predictions")
    if truth.size == 0:
        raise ValueError("no rows to score")
    squared_error = float(np.sum((truth - predicted) ** 2))
    if truth.size < 2:
        r2 = float("nan")
    else:
        total = float(np.sum((truth - truth.mean()) ** 2))
        # a constant target: perfect predictions score 1, any others 0 (sklearn's finite convention)
        r2 = 1.0 - squared_error / total if total > 0 else (1.0 if squared_error == 0 else 0.0)
    return {"mse": squared_error / truth.size, "r2": r2}


def task_metrics(task: str, y_true: np.ndarray, output: np.ndarray) -> dict[str, float]:
    """Dispatch to the metrics of the job's task: "classification" or "regression"."""
    if task == "classification":
        return classification_metrics(y_true, output)
    if task == "regression":
        return regression_metrics(y_true, output)
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
