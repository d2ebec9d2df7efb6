"""VIMADMM, the active party's half (004 §3.2, steps 1-6; the maths is in ``vflalgorithms.vimadmm.maths``).

Per round, with every party's embedding h^k of the batch: solve z exactly (Eq. 6), update the
duals λ (Eq. 7), form each party's residual s^k from the round's outputs (Eq. 9, as the
authors' code does: before the heads' step), and take one optimizer step on the heads (Eq. 8).
PushADMMState then carries λ_B, s^k_B and W_k to client k, which takes τ local steps on Eq. 10.
Only these d_c-wide tensors travel back, instead of SplitNN's embedding-wide gradients, and τ
local steps make each round count for more.

The active party's own bottom model, if it has features, takes its τ steps here, as a client
would. The duals λ_j live here for every training row, across epochs.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.family import Answer, Round
from vflalgorithms.vimadmm.maths import consensus_loss, dual_update, residuals, solve_z
from vflalgorithms.vimadmm.spec import ADMM_DUAL, ADMM_HEAD, ADMM_RESIDUAL
from vflalgorithms.vimsgd.active import VIMSGDServer
from vflcore.ml.models import LinearHeads


class VIMADMMServer(VIMSGDServer):
    """Linear heads and ADMM state on the server; bottom models trained by τ local steps."""

    name = "vimadmm"
    #: Each party is sent ADMM state (λ_B, s^k_B, W_k), not a gradient. λ_B and s^k_B are per-row
    #: functions of the labels: the label defence perturbs both. W_k, a weight matrix, is not per row.
    label_defended: tuple[str, ...] = (ADMM_DUAL, ADMM_RESIDUAL)
    checkpointed: tuple[str, ...] = (*VIMSGDServer.checkpointed, "duals")

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        self.rho = float(job_options(ctx.job)["rho"])
        self.local_steps = int(job_options(ctx.job)["local_steps"])
        self.duals = torch.zeros(ctx.job.num_rows, ctx.num_outputs, device=ctx.device)

    def _server_update(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray) -> Round:
        """Steps 2-5: z, the duals, one step for every head, and each party's residual from the round's outputs.

        Each party's answer is λ_B, its residual s^k_B and its head W_k (the active party's too).
        The residual is formed from the contributions h^i W_i computed *before* the heads' step,
        as the authors' code does (``fedserver/vimadmm.py``); Eq. 9 of the paper writes the updated
        heads, and with those the parties' joint correction overshoots and training diverges
        (docs/explanation/algorithms.md, "Where the papers and their code differ"). W_k itself is sent updated.
        """
        labels, heads = self.ctx.labels[rows], cast(LinearHeads, self.top)
        embeddings = [h.detach() for h in own + passive]
        with torch.no_grad():
            contributions = [head(h) for head, h in zip(heads.heads, embeddings, strict=True)]
            outputs = torch.stack(contributions).sum(dim=0)
            loss = self.loss_fn(outputs, labels)  # the model's loss on the batch, before this round
        z = solve_z(self.ctx.job.task, outputs, labels, self.duals[rows], self.rho)  # (2) Eq. 6
        duals = dual_update(self.duals[rows], outputs, z, self.rho)  # (3) Eq. 7
        self.duals[rows] = duals
        slack = residuals(contributions, z)  # (5) Eq. 9, from the outputs before the heads' step
        self.optimizer.zero_grad()  # (4) Eq. 8, one step for every head
        torch.autograd.backward(consensus_loss(heads(embeddings), duals, z, self.rho))
        self.optimizer.step()
        weights = [head.weight.detach().clone() for head in heads.linears()]
        answers = [{ADMM_DUAL: duals, ADMM_RESIDUAL: s, ADMM_HEAD: w} for s, w in zip(slack, weights, strict=True)]
        mine = len(own)
        return Round(float(loss.item()), answers[mine:], answers[0] if mine else None)

    def _local_updates(
        self, own: list[torch.Tensor], answer: Answer | None, passive: list[torch.Tensor], rows: np.ndarray
    ) -> None:
        """(6) Eq. 10 for the active party's own bottom model: τ steps on its own answer, as a client would."""
        if not own or answer is None or self.bottom_optimizer is None:
            return
        for step in range(self.local_steps):
            h = own[0] if step == 0 else self._own(rows)[0]
            self.bottom_optimizer.zero_grad()
            outputs = h @ answer[ADMM_HEAD].T
            torch.autograd.backward(consensus_loss(outputs, answer[ADMM_DUAL], answer[ADMM_RESIDUAL], self.rho))
            self.bottom_optimizer.step()
