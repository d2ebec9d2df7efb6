"""VIMSGD, the active party's half (VIM, 004 §3.1 and Appendix A.1): one linear head per party.

The server's model is Σ_k h^k W_k (004 Eq. 2): a linear head W_k for each party's embedding,
summed. Each round it first updates every head on the batch (Eq. 11-12), then computes the
gradient for each party's embedding with the *updated* heads (Eq. 13) and sends it back; the
parties then update their bottom models as in SplitNN (Eq. 14-15). The heads' weight norms
show how much the model relies on each party (client importance, 004 §4.2).

The active party's own features, if any, play the part of one more client: its bottom model
is updated from its embedding's gradient, like everyone else's. The
paper's regularisers (β R) are not applied; use the optimizer's own settings instead.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import nn

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.splitnn.family import Answer, Round, SplitNNFamilyServer, gradient_answer
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.models import LinearHeads, build_seeded
from vflcore.ml.optimizers import role_optimizer
from vflcore.wire.names import GRADIENT


class VIMSGDServer(SplitNNFamilyServer):
    """Linear heads on the server, stepped from the same backward pass as the embeddings' gradients.

    The heads are the method (one linear head per party, 004 Eq. 2): only the own bottom model is
    the user's (``factory_keys``).
    """

    name = "vimsgd"
    #: Each party is sent ∂L/∂h^k under the round's heads (Eq. 13).
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
        # The heads (Eq. 11) and the active party's own bottom (Eq. 14) step from one backward pass;
        # two optimizers, one per role (the heads', the bottom models').
        self.optimizer = role_optimizer(job, "top", self.top.parameters())
        self.bottom_optimizer = (
            role_optimizer(job, "bottom", self.bottom.parameters()) if self.bottom is not None else None
        )

    def _models(self) -> list[nn.Module]:
        return [self.top, *super()._models()]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        output: torch.Tensor = self.top(own + passive)
        return output

    def _server_update(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray) -> Round:
        """One backward pass under the heads as they are (authors' ``vimsgd_concat``): the heads' step and ∂L/∂h^k.

        The paper's Appendix A.1 writes the heads' step first and the embeddings' gradients under
        the updated heads (Eq. 11-13); the authors' code, which made the paper's tables, takes both
        from one backward pass, and with the paper's order VIMSGD learns slower and swings late in
        training (docs/explanation/algorithms.md, "Where the papers and their code differ").
        """
        labels = self.ctx.labels[rows]
        self.optimizer.zero_grad()
        leaves = [h.requires_grad_(True) for h in passive]
        own_leaf = self._cut(own)
        loss = self.loss_fn(self._forward(own_leaf, leaves), labels)
        loss.backward()
        self.optimizer.step()
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
