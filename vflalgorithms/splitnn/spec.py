"""SplitNN (002 §4.1): embeddings up, their gradients down, one step per batch on every party."""

from vflalgorithms.base import AlgorithmSpec, register
from vflalgorithms.delays import DELAY_DEFAULTS, check_delay

SPEC = register(
    AlgorithmSpec(
        name="splitnn",
        active="vflalgorithms.splitnn.active:SplitNNServer",
        passive="vflalgorithms.splitnn.passive:SplitNNClient",
        reference="vflalgorithms.splitnn.reference:ReferenceSplitNN",
        # An artificial delay in front of each passive party's upload (``vflalgorithms.delays``).
        defaults=DELAY_DEFAULTS,
        check=check_delay,
    )
)
