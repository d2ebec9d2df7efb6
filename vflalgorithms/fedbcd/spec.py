"""FedBCD (002 §4.3.1): SplitNN's exchange, then Q local steps on the stale gradient per round."""

from collections.abc import Mapping
from typing import Any

from vflalgorithms.options import whole_numbers
from vflalgorithms.registry import AlgorithmSpec, register
from vflalgorithms.splitnn.overlap import OVERLAP_DEFAULTS, check_overlap


def _check(options: Mapping[str, Any]) -> None:
    whole_numbers(options, "local_steps")
    check_overlap(options)


SPEC = register(
    AlgorithmSpec(
        name="fedbcd",
        active="vflalgorithms.fedbcd.active:FedBCDServer",
        passive="vflalgorithms.fedbcd.passive:FedBCDClient",
        reference="vflalgorithms.fedbcd.reference:ReferenceFedBCD",
        # Q, the local updates per communication round; Q = 1 is SplitNN exactly. The first
        # update's exchange may cross the link in parts (``vflalgorithms.splitnn.overlap``).
        defaults={"local_steps": 5, **OVERLAP_DEFAULTS},
        check=_check,
    )
)
