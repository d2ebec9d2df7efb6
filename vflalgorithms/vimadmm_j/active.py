"""VIMADMM-J, the active party's half (VIM without model splitting, 004 §3.3 and Appendix A.3).

Every party holds its whole model, bottom and linear head W_k, and sends its logits
o^k = f(x^k) W_k. The server keeps only the ADMM state: per round it solves z (Eq. 16), updates
the duals λ (Eq. 17), forms each party's residual s^k = z − Σ_{i≠k} o^i (Eq. 18), and sends λ_B
and s^k_B back by PushADMMState. Each party then takes τ local steps, each updating its head
(Eq. 19) and its bottom model (Eq. 20) from one backward pass, as the authors' code does. The prediction is Σ_k o^k.

The active party's own features, if any, are one more such party: its bottom and head live
here and take the same τ steps. After training, the client-importance report fetches every
party's head (a Share task, answered on the FetchHead call).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.options import job_options
from vflalgorithms.splitnn.family import Answer, Round, SplitNNFamilyServer
from vflalgorithms.vimadmm.maths import dual_update, joint_local_step, residuals, solve_z
from vflalgorithms.vimadmm.spec import ADMM_DUAL, ADMM_RESIDUAL
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.models import linear_head
from vflcore.ml.optimizers import role_optimizer
from vflcore.wire.names import HEAD
from vflcore.work_items import Share


class VIMADMMJServer(SplitNNFamilyServer):
    """ADMM state on the server; every model, heads included, on its own party."""

    name = "vimadmm_j"
    #: Each party is sent λ_B and s^k_B, per-row functions of the labels: the label defence perturbs both.
    label_defended: tuple[str, ...] = (ADMM_DUAL, ADMM_RESIDUAL)
    checkpointed: tuple[str, ...] = ("step_losses", "duals", "bottom", "head", "own_optimizers")

    def __init__(self, ctx: ActiveContext) -> None:
        # No server model to optimise: an active party without features of its own has no parameters at all.
        super().__init__(ctx)
        job = ctx.job
        self.rho = float(job_options(job)["rho"])
        self.local_steps = int(job_options(job)["local_steps"])
        self.duals = torch.zeros(job.num_rows, ctx.num_outputs, device=ctx.device)
        self.head: nn.Linear | None = None
        self.own_optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer] | None = None
        if self.bottom is not None:
            head = linear_head(job.embedding_dim, ctx.num_outputs, model_seed(job.seed, ACTIVE_PARTY, "head"))
            self.head = head.to(ctx.device)
            self.own_optimizers = (
                role_optimizer(job, "top", self.head.parameters()),
                role_optimizer(job, "bottom", self.bottom.parameters()),
            )

    @property
    def upload_width(self) -> int:
        return self.ctx.num_outputs

    def _models(self) -> list[nn.Module]:
        return [*super()._models(), *([self.head] if self.head is not None else [])]

    def _forward(self, own: list[torch.Tensor], passive: list[torch.Tensor]) -> torch.Tensor:
        own_logits = [self.head(h) for h in own] if self.head is not None else []
        return torch.stack(own_logits + passive).sum(dim=0)

    def _server_update(self, own: list[torch.Tensor], passive: list[torch.Tensor], rows: np.ndarray) -> Round:
        """z (Eq. 16), the duals (Eq. 17) and each party's residual (Eq. 18); each party's answer is λ_B and s^k_B."""
        labels = self.ctx.labels[rows]
        with torch.no_grad():
            contributions = ([self.head(own[0])] if self.head is not None else []) + passive
            outputs = torch.stack(contributions).sum(dim=0)
            loss = self.loss_fn(outputs, labels)  # the model's loss on the batch, before this round
        z = solve_z(self.ctx.job.task, outputs, labels, self.duals[rows], self.rho)  # Eq. 16
        duals = dual_update(self.duals[rows], outputs, z, self.rho)  # Eq. 17
        self.duals[rows] = duals
        slack = residuals(contributions, z)  # Eq. 18
        answers = [{ADMM_DUAL: duals, ADMM_RESIDUAL: s} for s in slack]
        mine = len(own)
        return Round(float(loss.item()), answers[mine:], answers[0] if mine else None)

    def _local_updates(
        self, own: list[torch.Tensor], answer: Answer | None, passive: list[torch.Tensor], rows: np.ndarray
    ) -> None:
        """The own head (Eq. 19) and bottom model (Eq. 20) together, τ times on its own answer, as a party would."""
        if self.head is None or self.own_optimizers is None or answer is None:
            return
        head_optimizer, bottom_optimizer = self.own_optimizers
        duals, slack = answer[ADMM_DUAL], answer[ADMM_RESIDUAL]
        for step in range(self.local_steps):
            h = own[0] if step == 0 else self._own(rows)[0]
            joint_local_step(h, self.head, head_optimizer, bottom_optimizer, duals, slack, self.rho)

    def client_importance(self) -> dict[int, float]:
        """‖W_k‖_F per party (004 §4.2). The heads live on the parties, so the server fetches them:
        a Share task asks, and each party uploads its W_k by FetchHead."""
        ctx, fed = self.ctx, self.ctx.parties
        round_ = ctx.job.epochs  # after the last training epoch
        fed.expect(HEAD, round_, 0, (ctx.num_outputs, ctx.job.embedding_dim))
        fed.dispatch(lambda tid: Share(tid, round_, HEAD))
        norms = {party: float(np.linalg.norm(head)) for party, head in fed.gather(HEAD, round_, 0).items()}
        if self.head is not None:
            norms[ACTIVE_PARTY] = float(torch.linalg.matrix_norm(self.head.weight.detach().cpu()))
        return dict(sorted(norms.items()))
