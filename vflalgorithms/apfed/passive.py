"""APFed-R and APFed-C, a passive party's half (000 §3–§4): score h^A with a model of its own.

Per step the party downloads the active party's h^A of the batch, computes its loss L_p (APFed-R:
reconstruct its own features from h^A; APFed-C: contrast h^A with its own encoding), steps its
own network, and uploads ∂L_p/∂h^A. Its features, its network and L_p itself stay here.

The trained model belongs to the active party alone, so a passive party is never asked for a
representation at evaluation or inference time.
"""

from __future__ import annotations

import numpy as np
import torch

from vflalgorithms.apfed import maths as apfed
from vflalgorithms.apfed.spec import ACTIVE_EMBEDDING, PASSIVE_GRADIENT
from vflalgorithms.contexts import PassiveContext
from vflalgorithms.halves import ClientAlgorithm
from vflcore.errors import VflError
from vflcore.ml.onnx_export import OnnxPart
from vflcore.ml.optimizers import role_optimizer
from vflcore.wire.tensors import check_shape


class APFedClient(ClientAlgorithm):
    """APFed-R: a decoder DEC_p from h^A back to this party's features (Eq. 12)."""

    name = apfed.APFED_R
    checkpointed: tuple[str, ...] = ("step_losses", "model", "optimizer")

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        self.model = apfed.passive_model(job, ctx.party, ctx.features.shape[1], ctx.model_factory).to(ctx.device)
        self.optimizer = role_optimizer(job, "bottom", self.model.parameters())
        #: L_p of every step, in order, for reference tests and this party's logs.
        self.step_losses: list[float] = []

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        ctx = self.ctx
        self.model.train()
        batches = ctx.schedule.batches(epoch)
        with ctx.link.exchange(
            ctx.job.job_id, epoch, len(batches), up=PASSIVE_GRADIENT, down=ACTIVE_EMBEDDING, first=first_batch
        ) as exchange:
            for b in range(first_batch, len(batches)):
                rows = batches[b]
                received = exchange.receive(b)
                check_shape(received, (len(rows), ctx.job.embedding_dim), what="h^A from the active party")
                active = ctx.tensor(received).requires_grad_(True)
                self.optimizer.zero_grad()
                loss = apfed.passive_loss(ctx.job, self.model, active, ctx.features[rows])
                torch.autograd.backward(loss)
                self.optimizer.step()
                self.step_losses.append(loss.item())
                assert active.grad is not None
                exchange.send(b, active.grad.cpu().numpy())
                ctx.after_step(epoch, b + 1, len(batches))

    def represent(self, features: torch.Tensor) -> torch.Tensor:
        raise VflError(f"{self.name}: the active party predicts alone; a passive party has no representation to send")

    def eval(self) -> None:
        self.model.eval()

    def onnx_part(self, rows: np.ndarray) -> OnnxPart:
        """DEC_p: h^A in (``embedding``), this party's reconstructed features out; probed with seeded noise."""
        self.eval()
        generator = torch.Generator().manual_seed(0)
        probe = torch.randn(len(rows), self.ctx.job.embedding_dim, generator=generator).to(self.ctx.device)
        return OnnxPart(self.model, {"embedding": probe}, ("reconstruction",))


class APFedCClient(APFedClient):
    """APFed-C: an encoder ENC_p of this party's features, contrasted with h^A (Eq. 13–16)."""

    name = apfed.APFED_C

    def onnx_part(self, rows: np.ndarray) -> OnnxPart:
        """ENC_p: this party's ``features`` in, its encoding h^p (``embedding``) out."""
        self.eval()
        return OnnxPart(self.model, {"features": self.ctx.features[rows]}, ("embedding",))
