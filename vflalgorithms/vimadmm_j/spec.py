"""VIMADMM-J (004 §3.3): every party keeps its own head and sends logits; λ_B and s^k_B come back."""

from vflalgorithms.options import local_steps_and_rho
from vflalgorithms.registry import AlgorithmSpec, register

SPEC = register(
    AlgorithmSpec(
        name="vimadmm_j",
        active="vflalgorithms.vimadmm_j.active:VIMADMMJServer",
        passive="vflalgorithms.vimadmm_j.passive:VIMADMMJClient",
        reference="vflalgorithms.vimadmm_j.reference:ReferenceVIMADMMJ",
        # As VIMADMM's; each local step updates the party's head and its bottom together.
        defaults={"rho": 1.0, "local_steps": 10},
        check=local_steps_and_rho,
        tuning=("rho", "local_steps"),
    )
)
