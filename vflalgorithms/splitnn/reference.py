"""SplitNN (and the relatives that build on it) in one process, with no federation in the way: the yardstick.

The same models (shapes and seeds), optimizers, batch schedule and loss as the federated
algorithm, but every party's bottom model lives here and the embeddings never leave memory. Tests
compare its per-step losses with a federated run, and the overhead benchmark compares its epoch
time. It copies the federated numerics on purpose: each passive embedding is cut out of the
graph (detach, then a leaf that requires grad) exactly where the wire cuts it, so that the two
runs agree to float32 rounding rather than merely in distribution.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from vflalgorithms.base import algorithm_options
from vflalgorithms.reference import FromTables
from vflalgorithms.splitnn.overlap import part_bounds
from vflcore.job import ACTIVE_PARTY, JobSpec, epoch_mean, model_seed
from vflcore.ml.losses import label_tensor, task_loss
from vflcore.ml.models import LinearHeads, build_seeded, job_optimizer, linear_head, mlp, seed_dropout

__all__ = ["ReferenceSplitNN"]


class ReferenceSplitNN(FromTables):
    """Every party's half of SplitNN in one process; FedBCD, VIMSGD, VIMADMM and VIMADMM-J build on it."""

    #: The ``[job] algorithm`` values this class trains.
    algorithms: tuple[str, ...] = ("splitnn",)
    #: VIMSGD and VIMADMM: the server's model is one linear head per party (``LinearHeads``).
    vim = False
    #: VIMADMM-J: every party holds its own head; the prediction sums their logits.
    joint = False

    def __init__(
        self,
        job: JobSpec,
        features: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
    ) -> None:
        """``features`` maps party id to its aligned float32 rows; party 1 (active) may have 0 columns."""
        if job.num_rows < 1:
            raise ValueError("job.num_rows must be set to the number of aligned rows")
        expected = {ACTIVE_PARTY, *job.passive_parties}
        if set(features) != expected:
            raise ValueError(f"features are for parties {sorted(features)}, the job has {sorted(expected)}")
        if any(len(x) != job.num_rows for x in features.values()):
            raise ValueError(f"every party's features must have job.num_rows = {job.num_rows} rows")
        self.job = job
        self.schedule = job.schedule()
        self.features = dict(features)
        self.labels, num_outputs = label_tensor(job.task, labels)
        self.loss_fn = task_loss(job.task)
        self.passive = sorted(job.passive_parties)

        self.bottoms: dict[int, nn.Module] = {}
        for party in [ACTIVE_PARTY, *self.passive]:
            width = self.features[party].shape[1]
            if width:  # an active party without features of its own has no bottom model
                factory = functools.partial(mlp, width, job.bottom_hidden, job.embedding_dim)
                self.bottoms[party] = build_seeded(factory, model_seed(job.seed, party, "bottom"))
        if job.algorithm not in self.algorithms:
            raise ValueError(
                f"{type(self).__name__} trains {' or '.join(self.algorithms)}, not {job.algorithm!r}; "
                "use algorithm_spec(job.algorithm).reference_class()"
            )
        options = algorithm_options(job.algorithm, job.algorithm_options)
        self.local_steps = int(options.get("local_steps", 1))
        self.micro_batches = int(options.get("micro_batches", 1))
        self.rho = float(options.get("rho", 1.0))
        self.duals = torch.zeros(job.num_rows, num_outputs)
        parts = len(self.bottoms)
        self.top = build_seeded(
            lambda: (
                LinearHeads(parts, job.embedding_dim, num_outputs)
                if self.vim
                else mlp(job.embedding_dim * parts, top_hidden, num_outputs, dropout=top_dropout)
            ),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        # SplitNN and FedBCD: the active party's optimizer holds top then its own bottom, as the
        # server's does. VIMSGD: the heads have their own, and every bottom model its own.
        active_params = list(self.top.parameters())
        if ACTIVE_PARTY in self.bottoms and not self.vim:
            active_params += list(self.bottoms[ACTIVE_PARTY].parameters())
        self.optimizers = [job_optimizer(job, active_params)]
        self.bottom_optimizers = {
            p: job_optimizer(job, self.bottoms[p].parameters())
            for p in self.bottoms
            if p != ACTIVE_PARTY or self.vim or self.joint
        }
        # VIMADMM-J: every party's own head, seeded as each party seeds its own.
        self.heads = {
            p: linear_head(job.embedding_dim, num_outputs, model_seed(job.seed, p, "head")) for p in self.bottoms
        }
        self.head_optimizers = {p: job_optimizer(job, head.parameters()) for p, head in self.heads.items()}
        self.optimizers += list(self.bottom_optimizers.values())
        #: The training loss of every step, in order.
        self.step_losses: list[float] = []
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def _top(self, rows: np.ndarray, passive: list[torch.Tensor], *, own: bool = True) -> torch.Tensor:
        """The server's model over [own embedding, passive embeddings in party order], as the server builds it.

        ``own=False`` cuts the active party's own embedding off the graph (VIMSGD's head update).
        """
        parts = []
        if ACTIVE_PARTY in self.bottoms:
            h = self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])
            parts.append(h if own else h.detach())
        output: torch.Tensor = self.top(parts + passive) if self.vim else self.top(torch.cat(parts + passive, dim=1))
        return output

    def train_epoch(self, epoch: int) -> float:
        """One epoch over the shared batch schedule; returns the row-weighted mean training loss."""
        for module in [self.top, *self.bottoms.values()]:
            module.train()
        return epoch_mean(self.schedule.batches(epoch), self._train_round, self.step_losses)

    def _train_round(self, rows: np.ndarray) -> float:
        """One communication round of the job's algorithm on ``rows``; returns its loss."""
        return self._round(rows)

    def _round(self, rows: np.ndarray) -> float:
        """SplitNN, or FedBCD with Q = ``local_steps``, as the daemons run it: the loss of the round's first update.

        Where the wire cuts the graph, the server gets a copy of each h^k as a fresh leaf, computes
        its gradient, and each passive party pushes that gradient into its own bottom model. The
        server's operations come in the server's order: h^1 of the whole batch cut off as a leaf;
        per part of the batch (one, unless ``micro_batches``: ``vflalgorithms.splitnn.overlap``)
        the top model on that part of h^1 and of every h^k, its loss scaled by the part's share of
        the rows, backward; then h^1's gradient into the own bottom model and one step. Each passive
        party back-propagates its parts' gradients in order, then steps.
        """
        bounds = part_bounds(len(rows), self.micro_batches)
        whole = len(bounds) == 1
        sent = {p: [self.bottoms[p](self.features[p][rows][a:b]) for a, b in bounds] for p in self.passive}
        received = {p: [h.detach().clone().requires_grad_(True) for h in sent[p]] for p in self.passive}
        active = self.optimizers[0]
        active.zero_grad()
        own = [self.bottoms[ACTIVE_PARTY](self.features[ACTIVE_PARTY][rows])] if ACTIVE_PARTY in self.bottoms else []
        own_leaf = [h.detach().requires_grad_(True) for h in own]
        total = 0.0
        for i, (a, b) in enumerate(bounds):
            inputs = [h if whole else h[a:b] for h in own_leaf] + [received[p][i] for p in self.passive]
            loss = self.loss_fn(self.top(torch.cat(inputs, dim=1)), self.labels[rows[a:b]])
            if not whole:
                loss = loss * ((b - a) / len(rows))
            loss.backward()
            total += loss.item()
        if own:
            torch.autograd.backward(own, [leaf.grad for leaf in own_leaf])
        active.step()
        cached = [torch.cat(received[p]).detach() for p in self.passive]
        for _ in range(1, self.local_steps):  # FedBCD: the active party again, on the cached h^k
            active.zero_grad()
            self.loss_fn(self._top(rows, cached), self.labels[rows]).backward()
            active.step()
        for p in self.passive:
            gradients = [leaf.grad for leaf in received[p]]
            self.bottom_optimizers[p].zero_grad()
            for h, gradient in zip(sent[p], gradients, strict=True):
                h.backward(gradient)
            self.bottom_optimizers[p].step()
            gradient = gradients[0] if whole else torch.cat(gradients)
            for _ in range(1, self.local_steps):  # FedBCD: the same gradient, into h^k from the current weights
                self.bottom_optimizers[p].zero_grad()
                self.bottoms[p](self.features[p][rows]).backward(gradient)
                self.bottom_optimizers[p].step()
        return total

    @torch.no_grad()
    def predict(self, rows: np.ndarray) -> torch.Tensor:
        """The split model's output (logits, or predictions for regression) on aligned ``rows``."""
        for module in [self.top, *self.bottoms.values()]:
            module.eval()
        if self.joint:
            return torch.stack(
                [self.heads[p](self.bottoms[p](self.features[p][rows])) for p in sorted(self.bottoms)]
            ).sum(0)
        return self._top(rows, [self.bottoms[p](self.features[p][rows]) for p in self.passive])
