"""Work the active party hands a passive party, as plain dataclasses.

The server pushes these down each party's Subscribe stream; the party answers with its own
calls. ``vflcore.wire`` converts them to and from protobuf, nothing else sees the proto types.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TrainEpoch:
    """Run one epoch of the job's algorithm over the shared batch schedule."""

    task_id: int
    epoch: int


@dataclass(frozen=True)
class Evaluate:
    """Send representations of these aligned rows for the end-of-epoch evaluation."""

    task_id: int
    epoch: int
    rows: np.ndarray


@dataclass(frozen=True)
class Infer:
    """Send representations of these aligned rows for an inference request."""

    task_id: int
    request_id: str
    rows: np.ndarray


@dataclass(frozen=True)
class Finish:
    """The job is over (or aborted); the party leaves (its checkpoints were written per epoch)."""

    task_id: int
    success: bool
    message: str


Task = TrainEpoch | Evaluate | Infer | Finish


# The names of the tensors each task exchanges. Both halves build keys through these functions,
# so a renamed exchange cannot drift apart between server and client.
EMBEDDING = "embedding"
GRADIENT = "gradient"
EVAL_EMBEDDING = "eval/embedding"


def infer_embedding_name(request_id: str) -> str:
    """Name of the representation a party sends for one inference request."""
    return f"infer/{request_id}/embedding"
