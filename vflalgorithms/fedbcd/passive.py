"""FedBCD, a passive party's half (thesis 002 §4.3.1): Q local updates per gradient received.

After sending h^k of a batch and receiving ∂L/∂h^k, the party updates its bottom model Q times:
each time it recomputes h^k with its current weights and pushes the same, stale gradient into
it. Fewer communication rounds buy more local computation; Q = 1 is SplitNN.
"""

from __future__ import annotations

from vflalgorithms.contexts import PassiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.passive import SplitNNClient


class FedBCDClient(SplitNNClient):
    """SplitNN's update, repeated ``[algorithm] local_steps`` times per received gradient."""

    name = "fedbcd"

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        self.local_steps = int(job_options(ctx.job)["local_steps"])
