"""VIMSGD, the active party's half (VIM, 004 §3.1 and Appendix A.1): one linear head per party.

The server's model is Σ_k h^k W_k (004 Eq. 2): a linear head W_k for each party's embedding,
summed. Each round it first updates every head on the batch (Eq. 11-12), then computes the
gradient for each party's embedding with the *updated* heads (Eq. 13) and sends it back; the
parties then update their bottom models as in SplitNN (Eq. 14-15). The heads' weight norms
show how much the model relies on each party (client importance, 004 §4.2).

The active party's own features, if any, play the part of one more client: its bottom model
is updated from its embedding's gradient under the updated heads, like everyone else's. The
paper's regularisers (β R) are not applied; use the optimizer's own settings instead.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.base import ActiveContext
from vflalgorithms.splitnn.family import Answer, Round, SplitNNFamilyServer, gradient_answer
from vflcore.job import ACTIVE_PARTY, model_seed
from vflcore.ml.models import LinearHeads, build_seeded, job_optimizer
from vflcore.wire.names import GRADIENT


class VIMSGDServer(SplitNNFamilyServer):
    """Linear heads on the server, updated before the embeddings' gradients are computed.

    The heads are the method (one linear head per party, 004 Eq. 2): only the own bottom model is
    the user's (``factory_keys``).
    """

    name = "vimsgd"
    #: Each party is sent ∂L/∂h^k under the updated heads (Eq. 13).
    label_defended: tuple[str, ...] = (GRADIENT,)
    checkpointed: tuple[str, ...] = ("step_losses", "top", "bottom", "optimizer", "bottom_optimizer")

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        parts = len(job.passive_parties) + (1 if self.bottom is not None else 0)
        heads = build_seeded(
            lambda: LinearHeads(parts, job.embedding_dim, ctx.num_outputs), model_seed(job.seed, ACTIVE_PARTY, "top")
        )
        self.top: nn.Module = heads.to(ctx.device)
        # Heads first (Eq. 11), then the active party's own bottom from the updated heads (Eq. 14):
        # two optimizers, so that neither step touches the other's parameters.
        self.optimizer = job_optimizer(job, self.top.parameters())
        self.bottom_optimizer = job_optimizer(job, self.bottom.parameters()) if self.bottom is not None else None

    def _models(self) -> list[nn.Module]:
        return [self.top, *super()._models()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(own + passive)
        return output

    def _server_update(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray) -> Round:
        """The heads on the embeddings as received (Eq. 11-12), then each embedding's gradient under them (Eq. 13)."""
        labels = self.ctx.labels[rows]
        self.optimizer.zero_grad()
        loss = self.loss_fn(self._forward([h.detach() for h in own], passive), labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        leaves = [h.requires_grad_(True) for h in passive]
        own_leaf = self._cut(own)
        self.loss_fn(self._forward(own_leaf, leaves), labels).backward()
        return Round(float(loss.item()), gradient_answer(leaves), gradient_answer(own_leaf)[0] if own_leaf else None)

    def _local_updates(
        self, own: list[torch.Tensor], answer: Answer | None, passive: list[torch.Tensor], rows: np.ndarray
    ) -> None:
        """The active party's own bottom model from its gradient, as a client would (Eq. 14-15)."""
        if self.bottom_optimizer is not None and answer is not None:
            self.bottom_optimizer.zero_grad()
            torch.autograd.backward(own, [answer[GRADIENT]])
            self.bottom_optimizer.step()

    def client_importance(self) -> dict[int, float]:
        """‖W_k‖_F per party id (004 §4.2); the active party is 1, if it has features of its own."""
        parties = ([ACTIVE_PARTY] if self.bottom is not None else []) + sorted(self.ctx.job.passive_parties)
        return dict(zip(parties, cast(LinearHeads, self.top).norms(), strict=True))
