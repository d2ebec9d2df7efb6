"""AdptVFedConv, the active party's half (003 §3.2, Algorithm 1): pre-train, broadcast, classify the maps.

Epoch 0 runs the phases that happen once, before the first epoch of the classifier:

1. the active party trains a CNN on its own piece, a feature extractor W_e^1 and a small
   classifier W_clst (Eq. 1), for ``pretrain_epochs``;
2. it broadcasts W_e^1's weights to every passive party (one tensor per parameter, on
   ReturnGradients) and collects each party's feature maps H^k of every aligned row (on
   SendEmbeddings, chunked); a party that does not deliver fails the job, naming it, before
   anything is checkpointed.

Every epoch (phase 3) then trains the server classifier W_s on the full maps, the pieces' maps
placed by position (Eq. 4–5). Evaluation and inference are federated: each passive party computes
H^k of the requested rows with its fine-tuned W_e^k.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog
import torch

from vflalgorithms.adptvfedconv import maths as conv
from vflalgorithms.adptvfedconv.spec import FEATURE_MAPS
from vflalgorithms.contexts import ActiveContext
from vflalgorithms.factories import PROBE_ROWS, ModelSlot
from vflalgorithms.halves import ServerAlgorithm
from vflcore.errors import ConfigError
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.models import build_seeded
from vflcore.ml.optimizers import role_optimizer, roles_optimizer
from vflcore.runtime.logs import progress
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import TrainEpoch

log = structlog.get_logger(__name__)


class AdptVFedConvServer(ServerAlgorithm):
    """W_e^1 and W_clst (pre-training), then W_s over every party's feature maps."""

    name = conv.NAME
    #: With the phase and the feature maps of phase 2, a resumed job does not pre-train again.
    checkpointed: tuple[str, ...] = (
        "step_losses",
        "extractor",
        "pretrain_head",
        "classifier",
        "optimizer",
        "maps",
        "phase",
    )
    needs_own_features = True
    factory_keys: tuple[str, ...] = (conv.EXTRACTOR_FACTORY, conv.CLASSIFIER_FACTORY)

    @classmethod
    def model_slots(cls, job: JobSpec, own_features: int, num_outputs: int) -> dict[str, ModelSlot]:
        """``extractor_factory(in_channels, width)``, on a piece; ``classifier_factory(width, h, w, outputs)``.

        The extractor's weights are broadcast to the passive parties (Eq. 2), so each of them must
        build the same architecture with its own ``[model] factory``; the classifier is the server's alone.
        """
        geo = conv.geometry(job)
        full = conv.full_map_shape(geo)
        return {
            conv.EXTRACTOR_FACTORY: ModelSlot(
                "the feature extractor W_e",
                (geo.channels, geo.width),
                (PROBE_ROWS, geo.channels, *geo.piece),
                (PROBE_ROWS, *geo.map_shape),
            ),
            conv.CLASSIFIER_FACTORY: ModelSlot(
                "the server classifier W_s",
                (*full, num_outputs),
                (PROBE_ROWS, *full),
                (PROBE_ROWS, num_outputs),
            ),
        }

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        self.geometry = conv.geometry(job)
        geo = self.geometry
        if ctx.features.shape[1] != geo.piece_features:
            raise ConfigError(
                f"the active party's data has {ctx.features.shape[1]} feature columns; its piece "
                f"({geo.channels} x {geo.piece[0]} x {geo.piece[1]}, [algorithm] piece) needs {geo.piece_features}"
            )
        options = conv.options_of(job)
        self.pretrain_epochs = int(options["pretrain_epochs"])
        self.pieces = ctx.features.reshape(len(ctx.features), geo.channels, *geo.piece)
        self.extractor = ctx.model(
            conv.EXTRACTOR_FACTORY,
            lambda channels, width: conv.extractor(channels, width, conv.padding(job)),
            (geo.channels, geo.width),
            model_seed(job.seed, ACTIVE_PARTY, "bottom"),
        )
        self.pretrain_head = build_seeded(
            lambda: conv.pretrain_classifier(geo.map_shape, ctx.num_outputs), model_seed(job.seed, ACTIVE_PARTY, "head")
        ).to(ctx.device)
        self.classifier = ctx.model(
            conv.CLASSIFIER_FACTORY,
            lambda width, h, w, outputs: conv.server_classifier(
                width, (h, w), outputs, ctx.top_hidden, dropout=ctx.top_dropout
            ),
            (*conv.full_map_shape(geo), ctx.num_outputs),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        self.optimizer = role_optimizer(job, "top", self.classifier.parameters())
        self.loss_fn = task_loss(job.task)
        #: The full feature maps of every aligned row, once phase 2 has delivered them.
        self.maps: torch.Tensor | None = None
        #: "pretraining", "transfer" (waiting for the parties' maps) or "classifier".
        self.phase = "pretraining"

    @property
    def upload_width(self) -> int:
        return self.geometry.map_features

    #: Inside an epoch only in phase 3: the checkpoints of an epoch are all taken after the
    #: transfer, so a job that fails in phases 1-2 runs them again from the start.
    resumes_mid_epoch = True

    @property
    def parties_in_step(self) -> bool:
        """Only phase 2 involves the parties; the classifier's steps (phase 3) are the server's alone."""
        return self.maps is None

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        if self.maps is None:
            assert first_batch == 0, "no checkpoint is taken before the transfer"
            self._pretrain()
            self.maps = self._transfer(epoch)
        self.phase = "classifier"
        return self._classifier_epoch(epoch, self.maps, first_batch)

    def _pretrain(self) -> None:
        """Phase 1 (Eq. 1): W_e^1 and W_clst on the active party's own piece and the labels."""
        ctx = self.ctx
        optimizer = roles_optimizer(
            ctx.job, {"bottom": self.extractor.parameters(), "top": self.pretrain_head.parameters()}
        )
        self.extractor.train()
        for epoch in progress(range(self.pretrain_epochs), total=self.pretrain_epochs, desc="pre-training W_e^1"):
            for rows in ctx.schedule.batches(epoch):
                optimizer.zero_grad()
                loss = self.loss_fn(self.pretrain_head(self.extractor(self.pieces[rows])), ctx.labels[rows])
                torch.autograd.backward(loss)
                optimizer.step()

    def _transfer(self, epoch: int) -> torch.Tensor:
        """Phase 2: broadcast W_e^1, collect every party's H^k of every aligned row, place them (Eq. 4)."""
        ctx, fed, geo = self.ctx, self.ctx.parties, self.geometry
        self.phase = "transfer"
        rows = ctx.job.num_rows
        fed.expect(FEATURE_MAPS, 0, 0, (rows, geo.map_features))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch))
        tensors = conv.extractor_tensors(self.extractor)
        for party in ctx.job.passive_parties:
            for name, tensor in tensors.items():
                fed.publish(
                    party,
                    TensorKey(ctx.job.job_id, 0, 0, conv.EXTRACTOR_PREFIX + name),
                    tensor.cpu().numpy(),
                    exact=True,  # weights, broadcast once and checked by digest: never through a lossy codec
                )
        log.info("extractor_broadcast", sha256=conv.extractor_digest(tensors), tensors=len(tensors))
        uploads = fed.gather(FEATURE_MAPS, 0, 0)
        with torch.no_grad():
            self.extractor.eval()
            own = self.extractor(self.pieces).reshape(rows, -1)
        maps = {ACTIVE_PARTY: own, **{p: ctx.tensor(a) for p, a in uploads.items()}}
        log.info("feature_maps_collected", parties=sorted(uploads), rows=rows, shape=list(geo.map_shape))
        return geo.full_map(maps)

    def _classifier_epoch(self, epoch: int, maps: torch.Tensor, first_batch: int) -> float:
        """Phase 3 (Eq. 5): one epoch of W_s on the full maps of the training rows, from ``first_batch``."""
        ctx = self.ctx
        self.classifier.train()
        batches = ctx.schedule.batches(epoch)
        steps = range(first_batch, len(batches))
        for b in progress(steps, total=len(steps), desc=f"epoch {epoch + 1}"):
            rows = batches[b]
            self.optimizer.zero_grad()
            loss: torch.Tensor = self.loss_fn(self.classifier(maps[rows]), ctx.labels[rows])
            torch.autograd.backward(loss)
            self.optimizer.step()
            self.record_step(float(loss.item()))
            ctx.after_step(epoch, b + 1, len(batches))
        return self.epoch_loss(batches)

    def eval(self) -> None:
        self.extractor.eval()
        self.classifier.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        geo = self.geometry
        own = self.extractor(features.reshape(-1, geo.channels, *geo.piece)).flatten(1)
        out: torch.Tensor = self.classifier(geo.full_map({ACTIVE_PARTY: own, **uploads}))
        return out
