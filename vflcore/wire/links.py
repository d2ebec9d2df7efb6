"""What a passive party's side of the wire offers the code above it: send, receive, and a streamed round.

``vflclient``'s connection implements these over gRPC; the algorithms and PSI see only these
interfaces. The RPC that carries a tensor follows from its name (``vflcore.wire.names``:
``upload_rpc`` and ``download_rpc``), so no caller says which call to use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType

import numpy as np

from vflcore.wire.tensors import TensorKey


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

    @abstractmethod
    def close(self) -> None:
        """Wait until the server has accepted every upload; raise what it refused."""

    @abstractmethod
    def cancel(self) -> None:
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


class FilteredExchange(TensorExchange):
    """Another exchange whose uploads pass ``upload`` first (a check, noise); downloads pass through.

    What the links that wrap a party's connection (its embedding noise, its divergence check)
    share: each says only what it does to an upload.
    """

    def __init__(self, inner: TensorExchange) -> None:
        self._inner = inner

    @abstractmethod
    def upload(self, batch: int, array: np.ndarray) -> np.ndarray:
        """What is sent for ``batch`` instead of ``array`` (it may raise to send nothing)."""

    def send(self, batch: int, array: np.ndarray) -> None:
        self._inner.send(batch, self.upload(batch, array))

    def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
        return self._inner.receive_bundle(batch)

    def receive(self, batch: int) -> np.ndarray:
        return self._inner.receive(batch)

    def close(self) -> None:
        self._inner.close()

    def cancel(self) -> None:
        self._inner.cancel()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._inner.__exit__(exc_type, exc, tb)


class ServerLink(ABC):
    """Upload a tensor to the active party, or download the one it holds for a key."""

    @abstractmethod
    def send(self, key: TensorKey, array: np.ndarray) -> None: ...

    @abstractmethod
    def receive(self, key: TensorKey) -> np.ndarray: ...

    def cancel_downloads(self) -> None:  # noqa: B027 - a link with nothing in flight has nothing to cancel
        """Cancel every ``receive`` still waiting: what a failed PSI attempt leaves behind. None by default."""


class TrainingLink(ServerLink):
    """A ServerLink that can also hold a whole round open: what an algorithm's passive half trains over."""

    @abstractmethod
    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        """A round of ``batches`` uploads named ``up``, each answered by the downloads named ``down``.

        ``first`` > 0: the round resumes at that batch (a job resumed inside an epoch).
        """
