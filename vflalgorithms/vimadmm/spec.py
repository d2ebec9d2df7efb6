"""VIMADMM (004 §3.2): z, λ and the heads on the server; λ_B, s^k_B and W_k pushed to each party."""

from vflalgorithms.options import local_steps_and_rho
from vflalgorithms.registry import AlgorithmSpec, register
from vflcore.wire.names import ADMM_STATE_PREFIX

# What the server pushes to party k per batch, on PushADMMState (the prefix picks that call).
ADMM_DUAL = ADMM_STATE_PREFIX + "dual"  # λ_B, (rows, outputs) float32
ADMM_RESIDUAL = ADMM_STATE_PREFIX + "residual"  # s^k_B, (rows, outputs) float32
ADMM_HEAD = ADMM_STATE_PREFIX + "head"  # W_k, (outputs, embedding_dim) float32

SPEC = register(
    AlgorithmSpec(
        name="vimadmm",
        active="vflalgorithms.vimadmm.active:VIMADMMServer",
        passive="vflalgorithms.vimadmm.passive:VIMADMMClient",
        reference="vflalgorithms.vimadmm.reference:ReferenceVIMADMM",
        # ρ, the ADMM penalty, and τ, the local SGD steps a party takes on Eq. 10 per round.
        defaults={"rho": 1.0, "local_steps": 10},
        check=local_steps_and_rho,
        tuning=("rho", "local_steps"),
    )
)
