"""The training loss and output width of each task (thesis 002 §5.1.2)."""

from __future__ import annotations

import torch
from torch import nn


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
