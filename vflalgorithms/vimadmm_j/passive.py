"""VIMADMM-J, a passive party's half (VIM without model splitting, 004 §3.3, Appendix A.3).

The party holds its whole model: a bottom model and its own linear head W_k. Per batch it sends
its logits o^k = f(x^k) W_k, receives the duals λ_B and its residual s^k_B by PushADMMState, and
takes τ local steps, each updating its head (Eq. 19) and its bottom model (Eq. 20) together. Its
head never leaves the party; for evaluation and inference it sends logits too.
"""

from __future__ import annotations

import numpy as np
import torch

from vflalgorithms.contexts import PassiveContext
from vflalgorithms.vimadmm.maths import joint_local_step
from vflalgorithms.vimadmm.passive import VIMADMMClient
from vflalgorithms.vimadmm.spec import ADMM_DUAL, ADMM_RESIDUAL
from vflcore.job.schedule import model_seed
from vflcore.ml.models import linear_head
from vflcore.ml.optimizers import role_optimizer
from vflcore.wire.names import HEAD
from vflcore.wire.tensors import TensorError


class VIMADMMJClient(VIMADMMClient):
    """VIMADMM's loop, with the head on this party: logits up, λ and s^k down."""

    name = "vimadmm_j"
    checkpointed: tuple[str, ...] = (*VIMADMMClient.checkpointed, "head_layer", "head_optimizer")
    state_names = (ADMM_DUAL, ADMM_RESIDUAL)

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        if job.num_outputs < 1:
            raise TensorError("job.num_outputs", "the server's job does not say how many outputs the model has")
        head = linear_head(job.embedding_dim, job.num_outputs, model_seed(job.seed, ctx.party, "head"))
        self.head_layer = head.to(ctx.device)
        self.head_optimizer = role_optimizer(job, "top", self.head_layer.parameters())

    def _upload(self, h: torch.Tensor) -> np.ndarray:
        """The party's logits o^k = f(x^k) W_k."""
        out: np.ndarray = self.head_layer(h).detach().cpu().numpy()
        return out

    def _local_step(self, h: torch.Tensor, state: dict[str, torch.Tensor]) -> None:
        duals, slack = state[ADMM_DUAL], state[ADMM_RESIDUAL]
        joint_local_step(h, self.head_layer, self.head_optimizer, self.optimizer, duals, slack, self.rho)

    def represent(self, features: torch.Tensor) -> torch.Tensor:
        """This party's logits o^k = f(x^k) W_k: what the server sums to predict."""
        out: torch.Tensor = self.head_layer(self.bottom(features))
        return out

    def share(self, name: str) -> np.ndarray:
        """W_k (``HEAD``), (outputs, embedding_dim): what the server's client-importance report measures."""
        if name != HEAD:
            return super().share(name)
        out: np.ndarray = self.head_layer.weight.detach().cpu().numpy().copy()
        return out
