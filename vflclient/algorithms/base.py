"""What every algorithm's client half provides, and what a passive party gives it to work with."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import torch
from torch import nn

from vflcore.job import JobSpec, Schedule
from vflcore.tensors import TensorKey

#: Builds a party's own bottom model: ``factory(num_features, embedding_dim) -> nn.Module``.
ModelFactory = Callable[[int, int], nn.Module]


class TensorExchange(ABC):
    """One round's uploads and downloads, batch by batch: ``send(b, h)``, then ``receive(b)``.

    Use it as a context manager. Leaving the block normally waits until the server has accepted
    every upload; leaving it with an exception cancels whatever is still in flight.
    """

    @abstractmethod
    def send(self, batch: int, array: np.ndarray) -> None:
        """Upload this party's tensor for ``batch``; may return before the server has it."""

    @abstractmethod
    def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
        """Every tensor the server answers ``batch`` with, by name; waits until they exist."""

    def receive(self, batch: int) -> np.ndarray:
        """The server's one answer for ``batch`` (a gradient, say); waits until it exists."""
        (only,) = self.receive_bundle(batch).values()
        return only

    def close(self) -> None:  # noqa: B027 - a link with nothing in flight has nothing to wait for
        """Wait until the server has accepted every upload; raise what it refused."""

    def cancel(self) -> None:  # noqa: B027 - as close
        """Abandon the round: stop whatever is still in flight."""

    def __enter__(self) -> TensorExchange:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.cancel()


class ServerLink(ABC):
    """The calls an algorithm's client half needs: upload a tensor, download the answer."""

    @abstractmethod
    def send(self, key: TensorKey, array: np.ndarray) -> None: ...

    @abstractmethod
    def receive(self, key: TensorKey) -> np.ndarray: ...

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], admm: bool = False
    ) -> TensorExchange:
        """A round of ``batches`` uploads named ``up``, each answered by downloads named ``down``.

        The answers come by ReturnGradients, or by PushADMMState if ``admm``. This default
        makes one call per tensor; a real connection keeps two streams open for the whole round
        instead, which saves a call set-up per tensor.
        """
        return _CallPerTensor(self, job_id, round_, up, (down,) if isinstance(down, str) else down)


class _CallPerTensor(TensorExchange):
    def __init__(self, link: ServerLink, job_id: str, round_: int, up: str, down: tuple[str, ...]) -> None:
        self._link, self._job_id, self._round, self._up, self._down = link, job_id, round_, up, down

    def send(self, batch: int, array: np.ndarray) -> None:
        self._link.send(TensorKey(self._job_id, self._round, batch, self._up), array)

    def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
        return {name: self._link.receive(TensorKey(self._job_id, self._round, batch, name)) for name in self._down}


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

    def head(self) -> np.ndarray | None:
        """This party's own linear head W_k, if its algorithm gives it one (VIMADMM-J)."""
        return None
