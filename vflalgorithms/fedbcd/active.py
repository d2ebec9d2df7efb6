"""FedBCD, the active party's half (thesis 002 §4.3.1, §5.4.1): Q updates per communication round.

The active party receives each passive party's h^k once per batch and returns ∂L/∂h^k once,
then makes Q - 1 further updates of its top and own bottom model on the same cached h^k,
recomputing only its own h^1. With Q = 1 it is SplitNN, step for step.
"""

from __future__ import annotations

from vflalgorithms.base import ActiveContext, job_options
from vflalgorithms.splitnn.active import SplitNNServer


class FedBCDServer(SplitNNServer):
    """SplitNN's step, repeated ``[algorithm] local_steps`` times on each round's embeddings."""

    name = "fedbcd"

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        self.local_steps = int(job_options(ctx.job)["local_steps"])
