"""The training loss and output width of each task (thesis 002 §5.1.2)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vflcore.errors import DataError


def task_loss(task: str) -> nn.Module:
    """Cross-entropy on logits for classification, mean squared error for regression."""
    if task == "classification":
        return nn.CrossEntropyLoss()
    if task == "regression":
        return nn.MSELoss()
    raise ValueError(f"unknown task {task!r}; choose 'classification' or 'regression'")


def label_tensor(task: str, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Labels in the form the loss wants, and the model's output width."""
    if task == "classification":
        as_int = labels.to(torch.int64)
        if not torch.equal(as_int.to(labels.dtype), labels) or int(as_int.min()) < 0:
            raise ValueError("classification labels must be non-negative integers (class ids)")
        return as_int, int(as_int.max()) + 1
    return labels.to(torch.float32).reshape(-1, 1), 1


def output_width(task: str, labels: np.ndarray, source: object) -> int:
    """The model's output width for a table's whole label column; DataError naming the file if it cannot train.

    From the whole column, not the aligned rows: a class absent from the intersection must still
    have an output, and every party must agree on the width.
    """
    try:
        _, outputs = label_tensor(task, torch.from_numpy(np.asarray(labels, dtype=np.float64)))
    except ValueError as exc:
        raise DataError(f"{source}: its label column cannot train a {task} job: {exc}") from None
    return outputs
