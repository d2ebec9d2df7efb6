"""AdptVFedConv, a passive party's half (003 §3.2.2–§3.2.3): adopt W_e^1, fine-tune it, upload the maps.

On the one TrainEpoch it gets, the party downloads the active party's extractor W_e^1 and starts
its own W_e^k from it (Eq. 2), fine-tunes W_e^k as the encoder of an autoencoder with a mirrored
decoder W_g^k on its own piece (Eq. 3: MSE; a small learning rate for the encoder, a normal one
for the decoder), and uploads its feature maps H^k of every aligned row. Its piece, W_g^k and its
fine-tuned W_e^k stay here; for evaluation and inference it computes H^k of the requested rows.
"""

from __future__ import annotations

import numpy as np
import structlog
import torch
import torch.nn.functional as F

from vflalgorithms.adptvfedconv import maths as conv
from vflalgorithms.adptvfedconv.spec import FEATURE_MAPS
from vflalgorithms.contexts import PassiveContext
from vflalgorithms.halves import ClientAlgorithm
from vflcore.errors import ConfigError
from vflcore.job.schedule import model_seed
from vflcore.ml.models import build_seeded
from vflcore.wire.tensors import TensorKey, check_shape

log = structlog.get_logger(__name__)


class AdptVFedConvClient(ClientAlgorithm):
    """W_e^k (from W_e^1) and the decoder W_g^k that fine-tunes it."""

    name = conv.NAME
    checkpointed: tuple[str, ...] = ("extractor", "decoder", "received_digest")

    def __init__(self, ctx: PassiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        self.geometry = geo = conv.geometry(job)
        if ctx.features.shape[1] != geo.piece_features:
            raise ConfigError(
                f"party {ctx.party}'s data has {ctx.features.shape[1]} feature columns; its piece "
                f"({geo.channels} x {geo.piece[0]} x {geo.piece[1]}) needs {geo.piece_features}"
            )
        options = conv.options_of(job)
        self.finetune_epochs = int(options["finetune_epochs"])
        self.encoder_lr, self.decoder_lr = float(options["encoder_lr"]), float(options["decoder_lr"])
        self.pieces = ctx.features.reshape(len(ctx.features), geo.channels, *geo.piece)
        # Overwritten by W_e^1. Built seeded all the same: an unseeded build draws from torch's
        # global RNG, and when it ran while another party's thread was inside ``build_seeded``
        # (the SDK and the tests run parties in one process) it shifted that party's initial
        # weights. Seen as a 0.03-0.07 loss gap to the reference in 1 run of 3.
        # The party's own factory, if it names one, must build the active party's extractor
        # architecture (its ``extractor_factory``): W_e^1 is adopted tensor by tensor.
        factory = ctx.model_factory or (lambda channels, width: conv.extractor(channels, width, conv.padding(job)))
        self.extractor = build_seeded(
            lambda: factory(geo.channels, geo.width), model_seed(job.seed, ctx.party, "bottom")
        ).to(ctx.device)
        self.decoder = build_seeded(
            lambda: conv.decoder(geo.channels, geo.width), model_seed(job.seed, ctx.party, "head")
        ).to(ctx.device)
        #: SHA-256 of W_e^1 as received (``extractor_digest``), for checking the broadcast.
        self.received_digest: str | None = None

    def train_epoch(self, epoch: int, first_batch: int = 0) -> None:
        assert first_batch == 0, "resumes only at the start of an epoch"
        self._adopt_extractor()
        self._finetune()
        self._upload_maps()

    def _adopt_extractor(self) -> None:
        """Eq. 2: W_e^k ← W_e^1, tensor by tensor, each checked against this party's architecture."""
        ctx = self.ctx
        state = self.extractor.state_dict()
        received: dict[str, torch.Tensor] = {}
        for name, mine in state.items():
            array = ctx.link.receive(TensorKey(ctx.job.job_id, 0, 0, conv.EXTRACTOR_PREFIX + name))
            check_shape(array, tuple(mine.shape), what=f"extractor tensor {name!r} from the active party")
            received[name] = ctx.tensor(array)
        self.extractor.load_state_dict(received)
        self.received_digest = conv.extractor_digest(conv.extractor_tensors(self.extractor))
        log.info("extractor_received", sha256=self.received_digest, tensors=len(received))

    def _finetune(self) -> None:
        """Eq. 3: the autoencoder (W_e^k, W_g^k) on this party's training rows, MSE."""
        ctx = self.ctx
        optimizer = torch.optim.Adam(
            [
                {"params": self.extractor.parameters(), "lr": self.encoder_lr},
                {"params": self.decoder.parameters(), "lr": self.decoder_lr},
            ],
            weight_decay=ctx.job.weight_decay,
        )
        self.extractor.train()
        self.decoder.train()
        for epoch in range(self.finetune_epochs):
            total, count = 0.0, 0
            for rows in ctx.schedule.batches(epoch):
                x = self.pieces[rows]
                optimizer.zero_grad()
                loss = F.mse_loss(self.decoder(self.extractor(x)), x)
                torch.autograd.backward(loss)
                optimizer.step()
                total, count = total + loss.item() * len(rows), count + len(rows)
            log.info("autoencoder_epoch", epoch=epoch, mse=round(total / max(1, count), 6))

    def _upload_maps(self) -> None:
        """H^k of every aligned row, in one tensor; the wire chunks it (``vflcore.wire.serde``)."""
        ctx = self.ctx
        maps = self.embed(np.arange(len(self.pieces)))
        ctx.link.send(TensorKey(ctx.job.job_id, 0, 0, FEATURE_MAPS), maps)

    def eval(self) -> None:
        self.extractor.eval()

    def represent(self, features: torch.Tensor) -> torch.Tensor:
        geo = self.geometry
        out: torch.Tensor = self.extractor(features.reshape(-1, geo.channels, *geo.piece)).flatten(1)
        return out
