"""APFed-R and APFed-C in one process, with no federation in the way: the yardstick for APFed.

The same models (shapes and seeds), optimizers, batch schedule and losses as the federated
algorithm (``vflalgorithms.apfed.active`` and ``vflalgorithms.apfed.passive``), with h^A cut out of
the graph where the wire cuts it, so that a federated run agrees with this one step for step.
The APFed experiment (``bench.algorithms.apfed``) trains with it too: with every λ_p = 0 it is SingleVL,
the active party alone.
"""

from __future__ import annotations

import numpy as np
import torch

from vflalgorithms.apfed import maths as apfed
from vflalgorithms.reference import FromTables
from vflcore.job.schedule import epoch_mean
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.models import seed_dropout
from vflcore.ml.optimizers import role_optimizer, roles_optimizer


class ReferenceAPFed(FromTables):
    """The active party's f_A and g_T, and every passive party's own network, trained together."""

    algorithms = (apfed.APFED_R, apfed.APFED_C)

    def _build(self) -> None:
        """The active party's encoder and classifier, each passive party's model, and their optimizers."""
        super()._build()
        job = self.job
        self.weights = {p: apfed.passive_weight(self.options, p) for p in self.passive}
        self.encoder = apfed.active_encoder(job, self.features[ACTIVE_PARTY].shape[1])
        self.classifier = apfed.active_classifier(job, self.top_hidden, self.num_outputs, dropout=self.top_dropout)
        self.optimizer = roles_optimizer(
            job, {"bottom": self.encoder.parameters(), "top": self.classifier.parameters()}
        )
        self.models = {p: apfed.passive_model(job, p, self.features[p].shape[1]) for p in self.passive}
        self.passive_optimizers = {p: role_optimizer(job, "bottom", m.parameters()) for p, m in self.models.items()}
        #: Each passive party's L_p at every step (``step_losses`` holds L_A, what the server records).
        self.passive_losses: dict[int, list[float]] = {p: [] for p in self.passive}
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def train_epoch(self, epoch: int) -> float:
        """One pass over the training rows; returns the mean L_A."""
        self.encoder.train()
        self.classifier.train()
        for model in self.models.values():
            model.train()
        return epoch_mean(self.schedule.batches(epoch), self._step, self.step_losses)

    def _step(self, rows: np.ndarray) -> float:
        h = self.encoder(self.features[ACTIVE_PARTY][rows])
        sent = h.detach().numpy()  # what crosses the wire to every passive party
        gradients: dict[int, torch.Tensor] = {}
        for party in self.passive:
            leaf = torch.from_numpy(sent.copy()).requires_grad_(True)
            optimizer = self.passive_optimizers[party]
            optimizer.zero_grad()
            loss = apfed.passive_loss(self.job, self.models[party], leaf, self.features[party][rows])
            torch.autograd.backward(loss)
            optimizer.step()
            self.passive_losses[party].append(loss.item())
            gradients[party] = torch.from_numpy(leaf.grad.numpy().copy())  # type: ignore[union-attr]
        self.optimizer.zero_grad()
        active_loss: torch.Tensor = self.loss_fn(self.classifier(h), self.labels[rows])
        combined = apfed.combine(active_loss, h, [(self.weights[p], gradients[p]) for p in self.passive])
        torch.autograd.backward(combined)
        self.optimizer.step()
        return active_loss.item()

    @torch.no_grad()
    def predict(self, rows: np.ndarray) -> torch.Tensor:
        """g_T(f_A(x^A)): the active party's prediction, alone (Eq. 11)."""
        self.encoder.eval()
        self.classifier.eval()
        out: torch.Tensor = self.classifier(self.encoder(self.features[ACTIVE_PARTY][rows]))
        return out
