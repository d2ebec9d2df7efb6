"""FedBCD in one process: SplitNN's reference with Q = ``local_steps`` updates per round on every party."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflcore.job import JobSpec


class ReferenceFedBCD(ReferenceSplitNN):
    """SplitNN's round already takes ``local_steps`` updates on the stale gradient (Q = 1 is SplitNN)."""

    algorithms = ("fedbcd",)

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
    ) -> None:
        super().__init__(job, features, labels, top_hidden=top_hidden, top_dropout=top_dropout)
        self.local_steps = int(self.options["local_steps"])
