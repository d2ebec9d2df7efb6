"""AdptVFedConv in one process, with no federation in the way: the yardstick for AdptVFedConv (003 Algorithm 1).

The same networks, seeds, optimizers, batch schedule and losses as the federated algorithm
(``vflalgorithms.adptvfedconv.active`` and ``vflalgorithms.adptvfedconv.passive``): W_e^1 and
W_clst seeded as party 1's "bottom" and "head", each W_g^k as party k's "head", W_s as party 1's
"top"; every phase walks ``schedule.batches(epoch)`` from epoch 0. The broadcast of W_e^1 is a
copy here, the upload of H^k a tensor in memory, so a federated run can be checked against this
one, and the AdptVFedConv experiment (``bench.algorithms.adptvfedconv``) measures the algorithm without
paying for the wire.

One ablation of 003 §4.3 lives here because it changes a phase rather than an option:
``model_transfer=False`` starts each passive W_e^k from its own seeded initialisation instead of
W_e^1, and trains it at the decoder's learning rate, since the encoder's small rate only makes
sense for fine-tuning an extractor that already works.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vflalgorithms.adptvfedconv import maths as conv
from vflalgorithms.reference import FromTables
from vflcore.job.schedule import epoch_mean, model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.models import build_seeded, seed_dropout
from vflcore.ml.optimizers import role_optimizer, roles_optimizer


class ReferenceAdptVFedConv(FromTables):
    """Every party's extractor, every passive party's decoder, W_clst and W_s, trained phase by phase.

    ``step_losses`` holds W_s's loss at every step of phase 3, in order (what the server records).
    """

    algorithms = (conv.NAME,)

    def __init__(
        self,
        job: JobSpec,
        pieces: Mapping[int, torch.Tensor],
        labels: torch.Tensor,
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
        model_transfer: bool = True,
    ) -> None:
        """``pieces`` maps party id to its aligned rows, one flattened piece per row (``Geometry.piece_features``)."""
        super().__init__(job, pieces, labels, top_hidden=top_hidden, top_dropout=top_dropout)
        self.geometry = geo = conv.geometry(job)
        if set(pieces) != set(geo.positions):
            raise ValueError(f"pieces are for parties {sorted(pieces)}, the job has {sorted(geo.positions)}")
        for party, rows in pieces.items():
            if tuple(rows.shape) != (job.num_rows, geo.piece_features):
                raise ValueError(
                    f"party {party}'s pieces are {tuple(rows.shape)}, expected ({job.num_rows}, {geo.piece_features})"
                )
        self.pieces = {p: rows.reshape(len(rows), geo.channels, *geo.piece) for p, rows in pieces.items()}
        outputs = self.num_outputs
        self.model_transfer = model_transfer
        options = self.options
        self.pretrain_epochs = int(options["pretrain_epochs"])
        self.finetune_epochs = int(options["finetune_epochs"])
        self.encoder_lr, self.decoder_lr = float(options["encoder_lr"]), float(options["decoder_lr"])

        self._new_extractor = functools.partial(conv.extractor, geo.channels, geo.width, conv.padding(job))
        self.extractors: dict[int, nn.Module] = {
            ACTIVE_PARTY: build_seeded(self._new_extractor, model_seed(job.seed, ACTIVE_PARTY, "bottom"))
        }
        self.pretrain_head = build_seeded(
            functools.partial(conv.pretrain_classifier, geo.map_shape, outputs),
            model_seed(job.seed, ACTIVE_PARTY, "head"),
        )
        new_decoder = functools.partial(conv.decoder, geo.channels, geo.width)
        self.decoders = {p: build_seeded(new_decoder, model_seed(job.seed, p, "head")) for p in self.passive}
        full_hw = (geo.map_shape[1] * geo.grid[0], geo.map_shape[2] * geo.grid[1])
        self.classifier = build_seeded(
            functools.partial(conv.server_classifier, geo.width, full_hw, outputs, top_hidden, dropout=top_dropout),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        self.optimizer = role_optimizer(job, "top", self.classifier.parameters())
        #: The full maps of every aligned row (Eq. 4), once phases 1 and 2 have run.
        self.maps: torch.Tensor | None = None
        #: Mean loss per epoch of phase 1 (cross-entropy) and of each party's autoencoder (MSE).
        self.pretrain_losses: list[float] = []
        self.autoencoder_losses: dict[int, list[float]] = {p: [] for p in self.passive}
        seed_dropout(job)  # dropout masks drawn as the server draws them

    def train_epoch(self, epoch: int) -> float:
        """One epoch of W_s (phase 3), after phases 1 and 2 on the first call, as the server does; the mean loss."""
        if self.maps is None:
            self.pretrain()
            for party in self.passive:
                self.finetune(party)
            self.maps = self.full_maps(np.arange(self.job.num_rows))
        self.classifier.train()
        maps = self.maps

        def step(rows: np.ndarray) -> float:
            self.optimizer.zero_grad()
            loss: torch.Tensor = self.loss_fn(self.classifier(maps[rows]), self.labels[rows])
            torch.autograd.backward(loss)
            self.optimizer.step()
            return float(loss.item())

        return epoch_mean(self.schedule.batches(epoch), step, self.step_losses)

    def pretrain(self) -> None:
        """Phase 1 (Eq. 1): W_e^1 and W_clst on the active party's piece and the labels."""
        extractor = self.extractors[ACTIVE_PARTY]
        optimizer = roles_optimizer(
            self.job, {"bottom": extractor.parameters(), "top": self.pretrain_head.parameters()}
        )
        extractor.train()
        pieces = self.pieces[ACTIVE_PARTY]
        for epoch in range(self.pretrain_epochs):
            total, count = 0.0, 0
            for rows in self.schedule.batches(epoch):
                optimizer.zero_grad()
                loss = self.loss_fn(self.pretrain_head(extractor(pieces[rows])), self.labels[rows])
                torch.autograd.backward(loss)
                optimizer.step()
                total, count = total + loss.item() * len(rows), count + len(rows)
            self.pretrain_losses.append(total / max(1, count))

    def finetune(self, party: int) -> None:
        """Phase 2 for one passive party: W_e^k ← W_e^1 (Eq. 2), then the autoencoder on its training rows (Eq. 3)."""
        if self.model_transfer:
            extractor = copy.deepcopy(self.extractors[ACTIVE_PARTY])
            encoder_lr = self.encoder_lr
        else:
            extractor = build_seeded(self._new_extractor, model_seed(self.job.seed, party, "bottom"))
            encoder_lr = self.decoder_lr
        self.extractors[party] = extractor
        decoder = self.decoders[party]
        optimizer = torch.optim.Adam(
            [
                {"params": extractor.parameters(), "lr": encoder_lr},
                {"params": decoder.parameters(), "lr": self.decoder_lr},
            ],
            weight_decay=self.job.weight_decay,
        )
        extractor.train()
        decoder.train()
        pieces = self.pieces[party]
        for epoch in range(self.finetune_epochs):
            total, count = 0.0, 0
            for rows in self.schedule.batches(epoch):
                x = pieces[rows]
                optimizer.zero_grad()
                loss = F.mse_loss(decoder(extractor(x)), x)
                torch.autograd.backward(loss)
                optimizer.step()
                total, count = total + loss.item() * len(rows), count + len(rows)
            self.autoencoder_losses[party].append(total / max(1, count))

    @torch.no_grad()
    def full_maps(self, rows: np.ndarray) -> torch.Tensor:
        """H of ``rows``: every party's H^k from its own W_e^k, placed by position (Eq. 4)."""
        missing = sorted(set(self.geometry.positions) - set(self.extractors))
        if missing:
            raise RuntimeError(f"parties {missing} have no extractor yet: train an epoch first")
        maps = {}
        for party, extractor in self.extractors.items():
            extractor.eval()
            maps[party] = extractor(self.pieces[party][rows]).reshape(len(rows), -1)
        return self.geometry.full_map(maps)

    @torch.no_grad()
    def predict(self, rows: np.ndarray) -> torch.Tensor:
        """W_s over the full maps of ``rows``: the federated prediction."""
        self.classifier.eval()
        out: torch.Tensor = self.classifier(self.full_maps(rows))
        return out
