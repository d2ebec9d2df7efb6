"""VIMADMM-J, a passive party's half (VIM without model splitting, 004 §3.3, Appendix A.3).

The party holds its whole model: a bottom model and its own linear head W_k. Per batch it sends
its logits o^k = f(x^k) W_k, receives the duals λ_B and its residual s^k_B by PushADMMState, and
takes τ local steps, each updating its head (Eq. 19) and then its bottom model (Eq. 20). Its
head never leaves the party; for evaluation and inference it sends logits too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vflclient.algorithms.base import PassiveContext
from vflclient.algorithms.splitnn import SplitNNClient
from vflcore.admm import joint_local_step
from vflcore.job import model_seed
from vflcore.models import linear_head, make_optimizer
from vflcore.tasks import ADMM_DUAL, ADMM_RESIDUAL, EMBEDDING
from vflcore.tensors import TensorError, check_shape

ADMM_STATE = (ADMM_DUAL, ADMM_RESIDUAL)


class VIMADMMJClient(SplitNNClient):
    """A bottom model and a linear head, both trained here by τ local steps per round."""

    name = "vimadmm_j"

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        if job.num_outputs < 1:
            raise TensorError("job.num_outputs", "the server's job does not say how many outputs the model has")
        self.rho = float(job.option("rho"))
        self.local_steps = int(job.option("local_steps"))
        self.head = linear_head(job.embedding_dim, job.num_outputs, model_seed(job.seed, ctx.party, "head"))
        self.head_optimizer = make_optimizer(job.optimizer, self.head.parameters(), job.learning_rate)

    def train_epoch(self, epoch: int) -> None:
        ctx = self.ctx
        self.bottom.train()
        batches = ctx.schedule.batches(epoch)
        with ctx.link.exchange(ctx.job.job_id, epoch, len(batches), up=EMBEDDING, down=ADMM_STATE, admm=True) as link:
            for b, rows in enumerate(batches):
                x = ctx.features[rows]
                h = self.bottom(x)
                self.delay.before_step()
                link.send(b, self.head(h).detach().numpy())
                duals, slack = self._checked(link.receive_bundle(b), len(rows))
                for step in range(self.local_steps):
                    if step:
                        h = self.bottom(x)
                    joint_local_step(h, self.head, self.head_optimizer, self.optimizer, duals, slack, self.rho)

    def _checked(self, state: dict[str, np.ndarray], rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        duals, slack = state[ADMM_DUAL], state[ADMM_RESIDUAL]
        check_shape(duals, (rows, self.ctx.job.num_outputs), what=f"{ADMM_DUAL} from the server")
        check_shape(slack, duals.shape, what=f"{ADMM_RESIDUAL} from the server")
        return torch.from_numpy(duals.astype(np.float32, copy=True)), torch.from_numpy(
            slack.astype(np.float32, copy=True)
        )

    @torch.no_grad()
    def embed(self, rows: np.ndarray) -> np.ndarray:
        """This party's logits o^k = f(x^k) W_k: what the server sums to predict."""
        self.bottom.eval()
        out: np.ndarray = self.head(self.bottom(self.ctx.features[rows])).numpy()
        return out

    def state(self) -> dict[str, Any]:
        return {**super().state(), "head": self.head.state_dict(), "head_optimizer": self.head_optimizer.state_dict()}
