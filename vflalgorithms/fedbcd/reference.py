"""FedBCD in one process: SplitNN's reference with Q = ``local_steps`` updates per round on every party."""

from __future__ import annotations

from vflalgorithms.splitnn.reference import ReferenceSplitNN


class ReferenceFedBCD(ReferenceSplitNN):
    """SplitNN's round already takes ``local_steps`` updates on the stale gradient (Q = 1 is SplitNN)."""

    algorithms = ("fedbcd",)

    def _build(self) -> None:
        """Q = ``[algorithm] local_steps`` updates per round."""
        super()._build()
        self.local_steps = int(self.options["local_steps"])
