"""Score a model's outputs with the task metrics the seed papers report.

Classification reports accuracy plus macro F1, precision and recall (macro, so that rare classes
count as much as common ones), and for a binary task ROC AUC: a threshold-free score that an
imbalanced test set cannot inflate, and the utility figure the privacy bench holds defences to.
Regression reports MSE and R². Values are plain floats so they
can go straight into logs and JSON.
"""

from __future__ import annotations

import numpy as np
from sklearn import metrics as skm

from vflcore.job import TASKS

__all__ = ["classification_metrics", "predict_classes", "regression_metrics", "task_metrics"]


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
    metrics = {
        "accuracy": float(skm.accuracy_score(truth, predicted)),
        "macro_f1": float(skm.f1_score(truth, predicted, average="macro", zero_division=0)),
        "precision": float(skm.precision_score(truth, predicted, average="macro", zero_division=0)),
        "recall": float(skm.recall_score(truth, predicted, average="macro", zero_division=0)),
    }
    score = _positive_score(logits)
    if score is not None and np.unique(truth).size == 2 and set(np.unique(truth).tolist()) == {0, 1}:
        metrics["roc_auc"] = float(skm.roc_auc_score(truth, score))
    return metrics


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
    r2 = float(skm.r2_score(truth, predicted)) if truth.size >= 2 else float("nan")
    return {"mse": float(skm.mean_squared_error(truth, predicted)), "r2": r2}


def task_metrics(task: str, y_true: np.ndarray, output: np.ndarray) -> dict[str, float]:
    """Dispatch to the metrics of the job's task: "classification" or "regression"."""
    if task == "classification":
        return classification_metrics(y_true, output)
    if task == "regression":
        return regression_metrics(y_true, output)
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
