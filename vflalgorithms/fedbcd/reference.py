"""FedBCD in one process: SplitNN's reference with Q = ``local_steps`` updates per round on every party."""

from __future__ import annotations

from vflalgorithms.splitnn.reference import ReferenceSplitNN


class ReferenceFedBCD(ReferenceSplitNN):
    """SplitNN's round already takes ``local_steps`` updates on the stale gradient (Q = 1 is SplitNN)."""

    algorithms = ("fedbcd",)
