"""Tensors the active party leaves for the passive parties to collect: a step's answers, weights.

The training loop ``publish``es a tensor for a party; that party's download handler waits in
``collect`` until it is there. What goes out is checked to be finite first (a NaN answer means
training ran away), and goes in the job's down codec unless it was published exact.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from vflalgorithms.divergence import nonfinite
from vflcore.errors import TrainingDiverged
from vflcore.wire.codecs import FP32, WireCodec
from vflcore.wire.tensors import TensorKey
from vflserver.federation.mailbox import Mailbox


class Downloads:
    """Published tensors, by party and key, until each party's handler collects its own."""

    def __init__(self, wire_down: WireCodec, *, step_timeout_s: float) -> None:
        #: The job's down codec (``[job] wire_codec``): what a step's answers go in.
        self.wire_down = wire_down
        self.step_timeout_s = step_timeout_s
        self.mailbox = Mailbox()
        self._lock = threading.Lock()
        #: Published tensors that go out exactly as float32 whatever the down codec (``publish(exact=True)``).
        self._exact: set[tuple[int, TensorKey]] = set()

    def publish(self, party: int, key: TensorKey, array: np.ndarray, *, exact: bool = False) -> None:
        """Leave a tensor for a party to collect (a gradient, say), sent in the job's down codec.

        ``exact``: sent as float32 whatever the codec (weights broadcast once, not a step's answer).
        A NaN or infinite value is never sent (TrainingDiverged): training ran away.
        """
        bad = nonfinite(array)
        if bad is not None:
            raise TrainingDiverged(f"the active party's {key.name} for party {party} is not finite ({bad}); not sent")
        if exact:
            with self._lock:
                self._exact.add((party, key))
        self.mailbox.put(party, key, array)

    def codec(self, party: int, key: TensorKey) -> WireCodec:
        """The codec a published tensor goes out in: the job's down codec, unless it was published exact."""
        with self._lock:
            if (party, key) in self._exact:
                self._exact.discard((party, key))
                return FP32
        return self.wire_down

    def collect(
        self, party: int, key: TensorKey, *, timeout_s: float | None = None, check: Callable[[], None] = lambda: None
    ) -> np.ndarray:
        """A party's handler waits here for the tensor the loop publishes for it.

        ``check`` raises once the waiting call is gone (the party cancelled it): a call left over
        from an attempt that failed must not take a tensor published for the next one.
        """
        return self.mailbox.take(party, key, timeout=timeout_s or self.step_timeout_s, check=check)
