"""What every algorithm's server half provides, and what the active party gives it to work with.

An algorithm is one module per side. The active party's daemon only calls the methods below,
so adding an algorithm adds modules, not branches in the daemon.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vflcore.job import JobSpec, Schedule
from vflserver.federation import Federation

#: Leaves each passive party of a round its answer: named tensors per party, in party order.
Publish = Callable[[list[dict[str, torch.Tensor]]], None]


@dataclass
class ActiveContext:
    """The active party's own data and its link to the passive parties, for one job."""

    job: JobSpec
    schedule: Schedule
    federation: Federation
    features: torch.Tensor  # aligned rows x own features (may have 0 columns)
    labels: torch.Tensor  # int64 class ids, or float32 (n, 1) targets for regression
    num_outputs: int
    top_hidden: tuple[int, ...]
    #: Dropout after each hidden layer of the active party's MLP top (``[model] top_dropout``).
    top_dropout: float = 0.0


class ServerAlgorithm(ABC):
    """The active party's half of a training algorithm."""

    #: The name used in ``[job] algorithm``.
    name: str

    def __init__(self, ctx: ActiveContext) -> None:
        self.ctx = ctx
        #: The training loss of every step, in order: what reference tests compare.
        self.step_losses: list[float] = []

    #: Whether ``predict`` needs each passive party's representation. APFed's does not: the
    #: active party evaluates and serves alone, and no party is asked for anything.
    needs_parties_to_predict = True
    #: Whether the active party must hold features of its own (APFed: it predicts from them alone).
    needs_own_features = False

    @property
    def upload_width(self) -> int:
        """Columns of what a passive party uploads per row: its embedding, or (VIMADMM-J) its logits."""
        return self.ctx.job.embedding_dim

    @abstractmethod
    def train_epoch(self, epoch: int) -> float:
        """Run one epoch with every passive party; return the mean training loss."""

    @abstractmethod
    def predict(self, rows: np.ndarray, embeddings: dict[int, np.ndarray]) -> torch.Tensor:
        """The model's output for aligned ``rows``, given each passive party's representation."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """Model and optimizer state for the active party's checkpoint."""

    def standalone_model(self) -> nn.Module | None:
        """The whole trained model on the active party's own features, if it needs no other party.

        APFed's f_A followed by g_T; None for the algorithms whose model spans every party.
        """
        return None

    def client_importance(self) -> dict[int, float] | None:
        """How much the trained model relies on each party, if the algorithm can tell (VIM: ‖W_k‖)."""
        return None
