"""VIMSGD (004 App. A.1): SplitNN with one linear head W_k per party on the server."""

from vflalgorithms.registry import AlgorithmSpec, register

SPEC = register(
    AlgorithmSpec(
        name="vimsgd",
        active="vflalgorithms.vimsgd.active:VIMSGDServer",
        passive="vflalgorithms.vimsgd.passive:VIMSGDClient",
        reference="vflalgorithms.vimsgd.reference:ReferenceVIMSGD",
    )
)
