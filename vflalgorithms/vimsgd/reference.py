"""VIMSGD in one process: linear heads W_k on the server, stepped before the bottom models (004 Eq. 11-15)."""

from __future__ import annotations

import numpy as np

from vflalgorithms.splitnn.reference import ReferenceSplitNN


class ReferenceVIMSGD(ReferenceSplitNN):
    """The server's model is Σ_k h^k W_k; the heads step first, then every bottom model under the new heads."""

    algorithms = ("vimsgd",)
    vim = True

    def _train_round(self, rows: np.ndarray) -> float:
        return self._vim_round(rows)

    def _vim_round(self, rows: np.ndarray) -> float:
        """VIMSGD (004 Eq. 11-15): the heads step first, then every bottom model under the new heads."""
        sent = [self.bottoms[p](self.features[p][rows]) for p in self.passive]
        heads = self.optimizers[0]
        heads.zero_grad()
        loss = self.loss_fn(self._top(rows, [h.detach() for h in sent], own=False), self.labels[rows])
        loss.backward()
        heads.step()
        for optimizer in self.bottom_optimizers.values():
            optimizer.zero_grad()
        self.loss_fn(self._top(rows, sent), self.labels[rows]).backward()  # through every bottom model
        for optimizer in self.bottom_optimizers.values():
            optimizer.step()
        return float(loss.item())
