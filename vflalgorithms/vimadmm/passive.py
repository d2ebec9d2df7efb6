"""VIMADMM, a passive party's half (004 §3.2, steps 1 and 6).

Per batch the party sends h^k, then receives by PushADMMState the duals λ_B, its residual s^k_B
and its head W_k, and takes τ local steps on Eq. 10 (``vflalgorithms.vimadmm.maths.consensus_loss``): its own
contribution h^k W_k is pulled towards s^k, steered by λ. It never sees labels, the other
parties' heads or their embeddings.
"""

from __future__ import annotations

import numpy as np
import torch

from vflalgorithms.contexts import PassiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.family import SplitNNFamilyClient
from vflalgorithms.vimadmm.maths import consensus_loss
from vflalgorithms.vimadmm.spec import ADMM_DUAL, ADMM_HEAD, ADMM_RESIDUAL
from vflcore.wire.names import EMBEDDING
from vflcore.wire.tensors import check_shape


class VIMADMMClient(SplitNNFamilyClient):
    """A bottom model trained by τ local steps on each round's ADMM state."""

    name = "vimadmm"
    #: What the server pushes per batch, in order (PushADMMState).
    state_names: tuple[str, ...] = (ADMM_DUAL, ADMM_RESIDUAL, ADMM_HEAD)

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        self.rho = float(job_options(ctx.job)["rho"])
        self.local_steps = int(job_options(ctx.job)["local_steps"])

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        ctx = self.ctx
        self.bottom.train()
        batches = ctx.schedule.batches(epoch)
        names = self.state_names
        with ctx.link.exchange(
            ctx.job.job_id, epoch, len(batches), up=EMBEDDING, down=names, first=first_batch
        ) as link:
            for b in range(first_batch, len(batches)):
                rows = batches[b]
                x = ctx.features[rows]
                h = self.bottom(x)
                self.delay.before_step()
                link.send(b, self._upload(h))
                state = self._checked(link.receive_bundle(b), len(rows))
                for step in range(self.local_steps):
                    if step:
                        h = self.bottom(x)
                    self._local_step(h, state)
                ctx.after_step(epoch, b + 1, len(batches))

    def _upload(self, h: torch.Tensor) -> np.ndarray:
        """What the party sends for a batch: its embedding h^k."""
        out: np.ndarray = h.detach().cpu().numpy()
        return out

    def _local_step(self, h: torch.Tensor, state: dict[str, torch.Tensor]) -> None:
        """One SGD step on Eq. 10 with the head the server sent."""
        self.optimizer.zero_grad()
        outputs = h @ state[ADMM_HEAD].T
        torch.autograd.backward(consensus_loss(outputs, state[ADMM_DUAL], state[ADMM_RESIDUAL], self.rho))
        self.optimizer.step()

    def _checked(self, state: dict[str, np.ndarray], rows: int) -> dict[str, torch.Tensor]:
        """The pushed tensors, after checking their shapes agree with each other and the batch."""
        duals = state[ADMM_DUAL]
        check_shape(duals, (rows, self._outputs(duals)), what=f"{ADMM_DUAL} from the server")
        check_shape(state[ADMM_RESIDUAL], duals.shape, what=f"{ADMM_RESIDUAL} from the server")
        if ADMM_HEAD in state:
            head_shape = (duals.shape[1], self.ctx.job.embedding_dim)
            check_shape(state[ADMM_HEAD], head_shape, what=f"{ADMM_HEAD} from the server")
        return {name: self.ctx.tensor(array) for name, array in state.items()}

    def _outputs(self, duals: np.ndarray) -> int:
        """The model's output width: the job's, or else what the server's duals show."""
        return self.ctx.job.num_outputs or (duals.shape[1] if duals.ndim == 2 else -1)
