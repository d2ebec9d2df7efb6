"""FedBCD, the active party's half (thesis 002 §4.3.1, §5.4.1): Q updates per round on every worker.

The active party receives each passive party's h^k once per batch, returns ∂L/∂h^k once and
steps its top model once. Only the workers loop (§5.4.1, and the authors' ``fedserver/fedbcd.py``):
each passive party, and the active party's own bottom model if it has features, makes Q - 1
further updates with the round's gradient, pushed into h recomputed from its current weights.
With Q = 1 it is SplitNN, step for step.
"""

from __future__ import annotations

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.active import SplitNNServer


class FedBCDServer(SplitNNServer):
    """SplitNN's step, with every bottom model's update repeated ``[algorithm] local_steps`` times a round."""

    name = "fedbcd"

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        self.local_steps = int(job_options(ctx.job)["local_steps"])
