"""VIMADMM, a passive party's half (004 §3.2, steps 1 and 6).

Per batch the party sends h^k, then receives by PushADMMState the duals λ_B, its residual s^k_B
and its head W_k, and takes τ local steps on Eq. 10 (``vflcore.admm.consensus_loss``): its own
contribution h^k W_k is pulled towards s^k, steered by λ. It never sees labels, the other
parties' heads or their embeddings.
"""

from __future__ import annotations

import numpy as np
import torch

from vflclient.algorithms.base import PassiveContext
from vflclient.algorithms.splitnn import SplitNNClient
from vflcore.admm import consensus_loss
from vflcore.tasks import ADMM_DUAL, ADMM_HEAD, ADMM_RESIDUAL, EMBEDDING
from vflcore.tensors import TensorError, check_shape

ADMM_STATE = (ADMM_DUAL, ADMM_RESIDUAL, ADMM_HEAD)


class VIMADMMClient(SplitNNClient):
    """A bottom model trained by τ local steps on each round's ADMM state."""

    name = "vimadmm"

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        self.rho = float(ctx.job.option("rho"))
        self.local_steps = int(ctx.job.option("local_steps"))

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        self.bottom.train()
        batches = ctx.schedule.batches(epoch)
        with ctx.link.exchange(ctx.job.job_id, epoch, len(batches), up=EMBEDDING, down=ADMM_STATE, admm=True) as link:
            for b, rows in enumerate(batches):
                x = ctx.features[rows]
                h = self.bottom(x)
                link.send(b, h.detach().numpy())
                duals, slack, head = self._checked(link.receive_bundle(b), len(rows))
                for step in range(self.local_steps):
                    if step:
                        h = self.bottom(x)
                    self.optimizer.zero_grad()
                    torch.autograd.backward(consensus_loss(h @ head.T, duals, slack, self.rho))
                    self.optimizer.step()

    def _checked(self, state: dict[str, np.ndarray], rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """λ, s and W as tensors, after checking their shapes agree with each other and the batch."""
        duals, slack, head = (state[name] for name in ADMM_STATE)
        if duals.ndim != 2 or duals.shape[0] != rows:
            raise TensorError(ADMM_DUAL, f"expected ({rows}, outputs) from the server, got {duals.shape}")
        check_shape(slack, duals.shape, what=f"{ADMM_RESIDUAL} from the server")
        check_shape(head, (duals.shape[1], self.ctx.job.embedding_dim), what=f"{ADMM_HEAD} from the server")
        as_tensor = [torch.from_numpy(a.astype(np.float32, copy=True)) for a in (duals, slack, head)]
        return as_tensor[0], as_tensor[1], as_tensor[2]
