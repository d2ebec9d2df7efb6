"""A passive party's embedding protection: every per-row tensor it sends is clipped, then noised, before it leaves.

The active party can invert embeddings back to features (an inversion attack needs only some rows
whose features it knows). The passive party defends itself, in its own process: each row of what
it uploads is clipped to L2 norm C (``[privacy] embedding_clip``) and gets Gaussian noise of
standard deviation z·C (``embedding_noise_multiplier``), which ``vflprivacy.accounting`` turns
into (ε, δ). The protection is a wrapper around the party's training link (``NoisyLink``), so it
covers every algorithm without any of them knowing: what goes through ``send`` or a round's
``exchange`` is protected before the wire codec encodes it (a bf16 codec rounds the noised value).

What is protected: every float tensor uploaded on SendEmbeddings: the round's embeddings (SplitNN,
FedBCD, async and its warm-up upload, VIMSGD, VIMADMM), VIMADMM-J's logits, APFed's gradient
∂L_p/∂h^A, AdptVFedConv's feature maps, the evaluation embeddings and the embeddings sent for
inference, after training too: a row's clean embedding sent once for inference would undo the
protection of every epoch, so inference is noised as well and counted as a release. Not
protected: VIMADMM-J's head W_k, sent once on FetchHead for the client-importance report (a
weight matrix, not a per-row tensor), and PSI, which never passes through this link.

Straight-through: an algorithm computes its update from its own un-noised output h. The gradient
the server returns is for the noised, clipped h̃ it saw, and the bottom model takes it as the
gradient with respect to h: the standard straight-through treatment of a non-differentiable
release (clipping and noise are not backpropagated through).

Noise is drawn from ``vflprivacy.noise.noise_generator`` keyed by ("embedding", round, batch,
party, name): a run resumed after kill -9 sends exactly what the uninterrupted run sent, and no
other party, though it knows the job's seed, can reproduce the noise to subtract it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import structlog

from vflcore.job.privacy import PrivacySpec
from vflcore.wire.links import FilteredExchange, TensorExchange, TrainingLink
from vflcore.wire.names import upload_rpc
from vflcore.wire.tensors import TensorKey
from vflprivacy.accounting import EmbeddingPrivacy, ReleaseLedger
from vflprivacy.noise import RowNormals, noise_generator, noise_key

log = structlog.get_logger(__name__)

#: The defence's name in the noise generator's key: no other defence draws the same numbers.
DEFENCE = "embedding"


def clip_rows(array: np.ndarray, clip: float) -> np.ndarray:
    """``array`` with every row (axis 0; later axes flattened) scaled down to L2 norm ``clip`` if it is longer."""
    rows = np.asarray(array, dtype=np.float64).reshape(len(array), -1)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    scale = np.minimum(1.0, clip / np.maximum(norms, np.finfo(np.float64).tiny))
    clipped: np.ndarray = (rows * scale).reshape(array.shape)
    return clipped


def name_position(name: str) -> int:
    """A tensor name as a noise position: distinct names (an epoch's embedding, an inference request) draw apart."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class EmbeddingNoise:
    """One party's clipping and noise for one job: ``protect`` a tensor at its position on the wire."""

    def __init__(self, key: bytes, party: int, clip: float, noise_multiplier: float, persistence: float = 0.0) -> None:
        if clip <= 0:
            raise ValueError(f"embedding_clip = {clip}; protection needs a clipping norm above 0")
        self.key, self.party, self.clip, self.noise_multiplier = key, party, clip, noise_multiplier
        #: The share of each row's noise that is the same in every release (``RowNormals``); needs ``rows``.
        self.persistence = persistence

    def protect(
        self, array: np.ndarray, round_: int, batch: int, name: str, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``array``'s rows clipped to ``clip``, plus N(0, (z·clip)²) per entry; float32, as the wire carries it.

        ``rows``: the rows' ids for the job, which key the noise's persistent share (the active
        party's h^A knows them; a passive party's link does not, and its noise is all fresh).
        """
        clipped = clip_rows(array, self.clip)
        if self.noise_multiplier > 0:
            generator = noise_generator(self.key, DEFENCE, round_, batch, self.party, name_position(name))
            stream = (self.party, name_position(name))
            persistence, ids = (self.persistence, rows) if rows is not None else (0.0, ())
            normals = RowNormals(generator, self.key, DEFENCE, stream, ids, persistence)
            clipped = clipped + normals.normal(0.0, self.noise_multiplier * self.clip, size=clipped.shape)
        return clipped.astype(np.float32)


def protects(name: str, array: np.ndarray) -> bool:
    """Whether an upload is a per-row float tensor of this party's (everything on SendEmbeddings but integers)."""
    return upload_rpc(name) == "SendEmbeddings" and np.issubdtype(np.asarray(array).dtype, np.floating)


class NoisyLink(TrainingLink):
    """A party's training link with its embedding protection in front: what the algorithm sends is protected first.

    Every release is counted in the job folder's ``privacy.json`` (``vflprivacy.accounting``);
    ``report`` gives ε at the job's end.
    """

    def __init__(self, inner: TrainingLink, noise: EmbeddingNoise, ledger: ReleaseLedger) -> None:
        self.inner, self.noise, self.ledger = inner, noise, ledger

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        if protects(key.name, array):
            array = self.noise.protect(array, key.round, key.batch, key.name)
            self.ledger.record(key.name, key.round)
        self.inner.send(key, array)

    def receive(self, key: TensorKey) -> np.ndarray:
        return self.inner.receive(key)

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        inner = self.inner.exchange(job_id, round_, batches, up=up, down=down, first=first)
        return _NoisyExchange(inner, self, round_, up)

    def report(self, delta: float) -> EmbeddingPrivacy:
        """ε at ``delta`` for every release of this job so far; logged, and written to ``privacy.json``."""
        report = self.ledger.report(self.noise.noise_multiplier, self.noise.clip, delta)
        log.info(
            "embedding_privacy",
            epsilon=report.epsilon,
            delta=report.delta,
            releases=report.releases,
            noise_multiplier=report.noise_multiplier,
            clip=report.clip,
        )
        return report


class _NoisyExchange(FilteredExchange):
    """A round's exchange whose uploads are protected before they are queued; downloads pass through."""

    def __init__(self, inner: TensorExchange, link: NoisyLink, round_: int, up: str) -> None:
        super().__init__(inner)
        self._link, self._round, self._up = link, round_, up

    def upload(self, batch: int, array: np.ndarray) -> np.ndarray:
        if protects(self._up, array):
            array = self._link.noise.protect(array, self._round, batch, self._up)
            self._link.ledger.record(self._up, self._round)
        return array


def protected_link(link: TrainingLink, privacy: PrivacySpec, folder: Path, party: int) -> TrainingLink:
    """``link`` behind this party's embedding protection if the job asks for it (``embedding_clip`` > 0), else ``link``.

    ``folder`` is the party's job folder: its secret noise key and ``privacy.json`` live there.
    """
    if not privacy.protects_embeddings:
        return link
    noise = EmbeddingNoise(noise_key(folder), party, privacy.embedding_clip, privacy.embedding_noise_multiplier)
    return NoisyLink(link, noise, ReleaseLedger(folder))


__all__ = ["DEFENCE", "EmbeddingNoise", "NoisyLink", "clip_rows", "name_position", "protected_link", "protects"]
