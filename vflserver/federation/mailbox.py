"""Tensors in flight between the training loop and the RPC handlers, keyed by (party, key).

Handlers ``put`` what a party uploaded; the training loop ``take``s it, and the reverse for
gradients. A waiter wakes up when its item arrives, when the job is aborted, or when the
``check`` it passed says the party has gone, so nothing blocks forever on a dead peer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from vflcore.errors import JobAborted
from vflcore.wire.tensors import TensorKey

# How often a waiter re-checks its peer's liveness while nothing arrives.
_POLL_S = 0.5


class Mailbox:
    """A dictionary of arrays with blocking, abortable ``take``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: dict[tuple[int, TensorKey], np.ndarray] = {}
        self._aborted: Exception | None = None

    def put(self, party: int, key: TensorKey, array: np.ndarray) -> None:
        with self._cond:
            self._items[(party, key)] = array
            self._cond.notify_all()

    def take(
        self,
        party: int,
        key: TensorKey,
        *,
        timeout: float,
        check: Callable[[], None] = lambda: None,
    ) -> np.ndarray:
        """Wait for and remove one item; ``check`` raises when the wait is hopeless."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (party, key) not in self._items:
                if self._aborted is not None:
                    raise JobAborted(str(self._aborted)) from self._aborted
                check()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"party {party}: no {key} within {timeout:.0f} s")
                self._cond.wait(min(_POLL_S, remaining))
            check()  # once more: a waiter whose wait became hopeless leaves the item for the next one
            return self._items.pop((party, key))

    def take_first(
        self,
        match: Callable[[int, TensorKey], bool],
        *,
        timeout: float,
        check: Callable[[], None] = lambda: None,
    ) -> tuple[int, TensorKey, np.ndarray]:
        """Wait for and remove the earliest-arrived item that ``match``es, from any party."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next(((p, k) for p, k in self._items if match(p, k)), None)
                if found is not None:
                    return found[0], found[1], self._items.pop(found)
                if self._aborted is not None:
                    raise JobAborted(str(self._aborted)) from self._aborted
                check()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no matching upload from any party within {timeout:.0f} s")
                self._cond.wait(min(_POLL_S, remaining))

    def discard(self, party: int, key: TensorKey) -> None:
        """Drop an item nobody will take (its exchange failed)."""
        with self._cond:
            self._items.pop((party, key), None)

    def has(self, party: int, key: TensorKey) -> bool:
        with self._cond:
            return (party, key) in self._items

    def keys_of(self, party: int) -> list[TensorKey]:
        """The keys of ``party``'s items still waiting, in arrival order."""
        with self._cond:
            return [key for owner, key in self._items if owner == party]

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def abort(self, reason: Exception) -> None:
        """Wake every waiter with ``reason``; later takes fail at once."""
        with self._cond:
            self._aborted = reason
            self._cond.notify_all()
