"""APFed-R and APFed-C, the active party's half (000 §3): train f_A and g_T, helped by the passive parties.

Per step the active party computes h^A = f_A(x^A_B) and leaves it for every passive party; each
returns ∂L_p/∂h^A, computed with a model the active party never sees. The active party then
steps f_A and g_T on L_A + Σ_p λ_p L_p (Eq. 8–10). The passive parties are black boxes: only
h^A goes down and only gradients come up.

After training the model is g_T(f_A(x^A)) (Eq. 11): the active party evaluates and serves it
alone, which is why ``needs_parties_to_predict`` is False: its ONNX export is a standalone model.

What h^A gives away. h^A is a function of the active party's features, trained towards its
labels: a passive party that knows one positive row's label ranks the others by their h^A's
cosine with it (issue 38: direction attack 0.81 and 0.74 on two tasks, 0.94 on the first batch).
Label DP cannot help (the features are not randomised), and there is no gradient for a label
defence. So the active party protects what it sends as a passive party protects its embeddings:
``[privacy] active_embedding_clip`` and ``active_embedding_noise_multiplier`` clip each row of h^A
and add Gaussian noise before it is published (``vflprivacy.embedding_noise.EmbeddingNoise``, keyed
by this party's secret key and the step, so a resumed job sends the same bytes), and every epoch's
release is counted in the job folder's ``privacy.json`` for ε. The passive parties' gradients are
for the noised h̃^A and are applied to h^A (straight-through, as for passive embeddings).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from vflalgorithms.apfed import maths as apfed
from vflalgorithms.apfed.spec import ACTIVE_EMBEDDING, PASSIVE_GRADIENT
from vflalgorithms.contexts import ActiveContext
from vflalgorithms.factories import PROBE_ROWS, ModelSlot
from vflalgorithms.halves import ServerAlgorithm
from vflalgorithms.options import algorithm_options
from vflcore.errors import ConfigError
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.models import mlp
from vflcore.ml.optimizers import roles_optimizer
from vflcore.runtime.logs import progress
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import TrainEpoch
from vflprivacy.accounting import ReleaseLedger
from vflprivacy.embedding_noise import EmbeddingNoise


class APFedServer(ServerAlgorithm):
    """APFed-R: the passive parties reconstruct their own features from h^A."""

    name = apfed.APFED_R
    checkpointed: tuple[str, ...] = ("step_losses", "encoder", "classifier", "optimizer")
    needs_parties_to_predict = False
    needs_own_features = True
    active_embedding = ACTIVE_EMBEDDING
    label_defence_instead = (
        "protect h^A, which reveals the labels through the active party's own features (neither a label defence "
        "nor label_dp_epsilon changes that), with active_embedding_clip and active_embedding_noise_multiplier"
    )

    def __init__(self, ctx: ActiveContext) -> None:
        super().__init__(ctx)
        job = ctx.job
        width = ctx.features.shape[1]
        if width < 1:
            raise ConfigError(f"{job.algorithm}: the active party needs features of its own (it infers alone)")
        self.encoder = ctx.model(
            apfed.ENCODER_FACTORY,
            lambda n_in, n_out: mlp(n_in, job.bottom_hidden, n_out),
            (width, job.embedding_dim),
            model_seed(job.seed, ACTIVE_PARTY, "bottom"),
        )
        self.classifier = ctx.model(
            apfed.HEAD_FACTORY,
            lambda n_in, n_out: mlp(n_in, ctx.top_hidden, n_out, dropout=ctx.top_dropout),
            (job.embedding_dim, ctx.num_outputs),
            model_seed(job.seed, ACTIVE_PARTY, "top"),
        )
        self.optimizer = roles_optimizer(
            job, {"bottom": self.encoder.parameters(), "top": self.classifier.parameters()}
        )
        self.loss_fn = task_loss(job.task)
        options = algorithm_options(job.algorithm, job.algorithm_options)
        self.weights = {p: apfed.passive_weight(options, p) for p in job.passive_parties}
        self.noise, self.ledger = _embedding_protection(ctx)

    resumes_mid_epoch = True
    scores_inside_epoch = True
    factory_keys: tuple[str, ...] = (apfed.ENCODER_FACTORY, apfed.HEAD_FACTORY)

    @classmethod
    def model_slots(cls, job: JobSpec, own_features: int, num_outputs: int) -> dict[str, ModelSlot]:
        """``encoder_factory(num_features, embedding_dim)`` is f_A, ``head_factory(embedding_dim, num_outputs)`` g_T."""
        e = job.embedding_dim
        return {
            apfed.ENCODER_FACTORY: ModelSlot(
                "the encoder f_A", (own_features, e), (PROBE_ROWS, own_features), (PROBE_ROWS, e)
            ),
            apfed.HEAD_FACTORY: ModelSlot("the head g_T", (e, num_outputs), (PROBE_ROWS, e), (PROBE_ROWS, num_outputs)),
        }

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        ctx, fed = self.ctx, self.ctx.parties
        batches = ctx.schedule.batches(epoch)
        for b in range(first_batch, len(batches)):
            fed.expect(PASSIVE_GRADIENT, epoch, b, (len(batches[b]), ctx.job.embedding_dim))
        fed.dispatch(lambda tid: TrainEpoch(tid, epoch, first_batch))
        self.encoder.train()
        self.classifier.train()
        steps = range(first_batch, len(batches))
        for b in progress(steps, total=len(steps), desc=f"epoch {epoch + 1}"):
            self.record_step(self._step(epoch, b, batches[b]))
            ctx.after_step(epoch, b + 1, len(batches))
        return self.epoch_loss(batches)

    def _step(self, epoch: int, batch: int, rows: np.ndarray) -> float:
        ctx, fed = self.ctx, self.ctx.parties
        self.optimizer.zero_grad()
        h = self.encoder(ctx.features[rows])
        sent = h.detach().cpu().numpy()
        if self.noise is not None and self.ledger is not None:
            sent = self.noise.protect(sent, epoch, batch, ACTIVE_EMBEDDING, rows)
            self.ledger.record(ACTIVE_EMBEDDING, epoch)
        key = TensorKey(ctx.job.job_id, epoch, batch, ACTIVE_EMBEDDING)
        for party in ctx.job.passive_parties:
            fed.publish(party, key, sent)
        # L_A while the passive parties compute theirs.
        active_loss: torch.Tensor = self.loss_fn(self.classifier(h), ctx.labels[rows])
        uploads = fed.gather(PASSIVE_GRADIENT, epoch, batch)
        passive = [(self.weights[p], ctx.tensor(uploads[p])) for p in sorted(uploads)]
        torch.autograd.backward(apfed.combine(active_loss, h, passive))
        self.optimizer.step()
        return active_loss.item()

    def privacy_releases(self) -> dict[str, object] | None:
        """ε of the noised h^A this party sent (``active_embedding``), or None when it sent it clean."""
        if self.noise is None or self.ledger is None:
            return None
        spec = self.ctx.job.privacy
        report = self.ledger.report(self.noise.noise_multiplier, self.noise.clip, spec.dp_delta, spec.noise_persistence)
        return {"active_embedding": report.as_json()}

    def eval(self) -> None:
        self.encoder.eval()
        self.classifier.eval()

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        del uploads  # APFed predicts from the active party's own features alone (Eq. 11)
        out: torch.Tensor = self.classifier(self.encoder(features))
        return out


def _embedding_protection(ctx: ActiveContext) -> tuple[EmbeddingNoise | None, ReleaseLedger | None]:
    """The clipping and noise h^A gets before it is sent, and the ledger of its releases; (None, None) when off."""
    spec = ctx.job.privacy
    if not spec.protects_active_embedding:
        return None, None
    if ctx.privacy_key is None or ctx.folder is None:
        raise ConfigError(
            "[privacy] active_embedding_clip needs the active party's noise key and job folder; "
            "ActiveParty gives both (vflserver.training.training_labels)"
        )
    noise = EmbeddingNoise(
        ctx.privacy_key,
        ACTIVE_PARTY,
        spec.active_embedding_clip,
        spec.active_embedding_noise_multiplier,
        spec.noise_persistence,
    )
    return noise, ReleaseLedger(ctx.folder)


class APFedCServer(APFedServer):
    """APFed-C: the passive parties score h^A against their own encodings, contrastively."""

    name = apfed.APFED_C
