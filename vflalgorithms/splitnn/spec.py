"""SplitNN (002 §4.1): embeddings up, their gradients down, one step per batch on every party."""

from collections.abc import Mapping
from typing import Any

from vflalgorithms.delays import DELAY_DEFAULTS, check_delay
from vflalgorithms.registry import AlgorithmSpec, register
from vflalgorithms.splitnn.overlap import OVERLAP_DEFAULTS, check_overlap


def _check(options: Mapping[str, Any]) -> None:
    check_delay(options)
    check_overlap(options)


SPEC = register(
    AlgorithmSpec(
        name="splitnn",
        active="vflalgorithms.splitnn.active:SplitNNServer",
        passive="vflalgorithms.splitnn.passive:SplitNNClient",
        reference="vflalgorithms.splitnn.reference:ReferenceSplitNN",
        # An artificial delay in front of each passive party's upload (``vflalgorithms.delays``),
        # and the parts each batch crosses the link in (``vflalgorithms.splitnn.overlap``).
        defaults={**DELAY_DEFAULTS, **OVERLAP_DEFAULTS},
        check=_check,
    )
)
