"""What every algorithm's client half provides, and what a passive party gives it to work with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from vflcore.job import JobSpec, Schedule
from vflcore.tensors import TensorKey

#: Builds a party's own bottom model: ``factory(num_features, embedding_dim) -> nn.Module``.
ModelFactory = Callable[[int, int], nn.Module]


class ServerLink(ABC):
    """The two calls an algorithm's client half needs: upload a tensor, download the answer."""

    @abstractmethod
    def send(self, key: TensorKey, array: np.ndarray) -> None: ...

    @abstractmethod
    def receive(self, key: TensorKey) -> np.ndarray: ...


@dataclass
class PassiveContext:
    """One passive party's data, model factory and link to the server, for one job."""

    party: int
    job: JobSpec
    schedule: Schedule
    features: torch.Tensor  # aligned rows x this party's features
    link: ServerLink
    model_factory: ModelFactory | None = None


class ClientAlgorithm(ABC):
    """A passive party's half of a training algorithm."""

    name: str

    def __init__(self, ctx: PassiveContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def train_epoch(self, epoch: int) -> None:
        """Take part in one epoch, following the shared batch schedule."""

    @abstractmethod
    def embed(self, rows: np.ndarray) -> np.ndarray:
        """This party's representation of aligned ``rows``, for evaluation and inference."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """Model and optimizer state for this party's checkpoint."""
