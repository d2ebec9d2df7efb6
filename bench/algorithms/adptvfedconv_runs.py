"""One run of the AdptVFedConv experiment (``bench.algorithms.adptvfedconv``): a method and a seed in, accuracy out.

sklearn's 8x8 digits are cut into four 4x4 quadrants by ``vflalgorithms.adptvfedconv.maths.Geometry``'s
default row-major positions: party 1 (active, labels) the top-left, parties 2, 3, 4 the top-right,
bottom-left and bottom-right. The three federated methods train through the project's in-process
reference (``ReferenceAdptVFedConv``), so the experiment measures the code the product runs; the
two bounds are plain end-to-end CNNs built from the same networks:

- Centralised: W_e on the whole image (its map is exactly the size of the full map), then W_s;
- Non-cooperation: W_e^1 on the active party's quadrant, then a W_s-shaped classifier over its
  own 2x2 map only.

Both are seeded as party 1's "bottom" and "top", so they start from the same weights as the
federated run's W_e^1 and W_s (the convolutions do not depend on the image size), and train for
pretrain + classifier epochs, as long as the federated active party trains in all. A run is a
small frozen value so that it can cross to a worker process and come back as its result's key.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits

from vflalgorithms.adptvfedconv import maths as conv
from vflalgorithms.adptvfedconv.reference import ReferenceAdptVFedConv
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.losses import task_loss
from vflcore.ml.models import build_seeded, job_optimizer

# Fixed before measuring, not tuned afterwards (see bench.algorithms.adptvfedconv).
PRETRAIN_EPOCHS = 20
FINETUNE_EPOCHS = 10
EPOCHS = 30  # W_s, phase 3
BATCH_SIZE = 64
LEARNING_RATE = 1e-3  # Adam, phases 1 and 3 and both bounds
ENCODER_LR = 1e-5
DECODER_LR = 1e-3
CHANNELS = 16
TOP_HIDDEN = (64,)
PASSIVE = (2, 3, 4)
IMAGE_SIDE = 8

#: Table 2's rows, in the paper's order.
METHODS = ("AdptVFedConv", "Centralised", "Non-cooperation", "No model transfer", "Zero padding")


@dataclass(frozen=True)
class Run:
    """One training run."""

    method: str
    seed: int


@dataclass(frozen=True)
class Result:
    """A run's held-out accuracy (a fraction) and its wall time."""

    run: Run
    accuracy: float
    seconds: float


@functools.cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's 1797 8x8 digits as (rows, 1, 8, 8), pixels scaled to [0, 1], and their labels; once per process."""
    digits = load_digits()
    images = (digits.data.astype(np.float32) / 16.0).reshape(-1, 1, IMAGE_SIDE, IMAGE_SIDE)
    return images, digits.target.astype(np.int64)


def party_pieces(images: torch.Tensor, geometry: conv.Geometry) -> dict[int, torch.Tensor]:
    """(rows, channels, H, W) images → each party's piece, flattened as its CSV holds it; the inverse of ``image``."""
    h, w = geometry.piece
    return {
        party: images[:, :, r * h : (r + 1) * h, c * w : (c + 1) * w].reshape(len(images), -1).contiguous()
        for party, (r, c) in geometry.positions.items()
    }


def job_for(run: Run) -> JobSpec:
    """The job of ``run``: the shared settings, the run's seed (model init and train/test split), its padding."""
    return JobSpec(
        job_id=f"adptvfedconv-{run.method.lower().replace(' ', '-')}-{run.seed}",
        algorithm=conv.NAME,
        seed=run.seed,
        batch_size=BATCH_SIZE,
        epochs=EPOCHS,
        optimizer="adam",
        learning_rate=LEARNING_RATE,
        test_fraction=0.2,
        num_rows=len(_digits()[1]),
        passive_parties=PASSIVE,
        algorithm_options={
            "image_channels": 1,
            "piece": [IMAGE_SIDE // 2, IMAGE_SIDE // 2],
            "grid": [2, 2],
            "channels": CHANNELS,
            "padding": "zero" if run.method == "Zero padding" else "replication",
            "pretrain_epochs": PRETRAIN_EPOCHS,
            "finetune_epochs": FINETUNE_EPOCHS,
            "encoder_lr": ENCODER_LR,
            "decoder_lr": DECODER_LR,
        },
    )


def _accuracy(logits: torch.Tensor, rows: np.ndarray) -> float:
    return float((logits.argmax(dim=1).numpy() == _digits()[1][rows]).mean())


def _train_federated(run: Run, job: JobSpec, pieces: Mapping[int, torch.Tensor], labels: torch.Tensor) -> float:
    """AdptVFedConv and its two ablations through the reference: phases 1-2, then ``EPOCHS`` of W_s."""
    model = ReferenceAdptVFedConv(
        job, pieces, labels, top_hidden=TOP_HIDDEN, model_transfer=run.method != "No model transfer"
    )
    for epoch in range(job.epochs):
        model.train_epoch(epoch)
    test = model.schedule.test_rows
    return _accuracy(model.predict(test), test)


def _train_end_to_end(job: JobSpec, images: torch.Tensor, labels: torch.Tensor) -> float:
    """W_e then a W_s-shaped classifier over W_e's map of ``images``, trained together with cross-entropy."""
    geo = conv.geometry(job)
    map_hw = (images.shape[2] // 2, images.shape[3] // 2)
    extractor = build_seeded(
        lambda: conv.extractor(geo.channels, geo.width, conv.padding(job)), model_seed(job.seed, ACTIVE_PARTY, "bottom")
    )
    outputs = int(labels.max()) + 1
    classifier = build_seeded(
        lambda: conv.server_classifier(geo.width, map_hw, outputs, TOP_HIDDEN),
        model_seed(job.seed, ACTIVE_PARTY, "top"),
    )
    model = torch.nn.Sequential(extractor, classifier)
    optimizer = job_optimizer(job, model.parameters())
    loss_fn = task_loss(job.task)
    schedule = job.schedule()
    model.train()
    for epoch in range(PRETRAIN_EPOCHS + job.epochs):
        for rows in schedule.batches(epoch):
            optimizer.zero_grad()
            loss = loss_fn(model(images[rows]), labels[rows])
            torch.autograd.backward(loss)
            optimizer.step()
    model.eval()
    with torch.no_grad():
        return _accuracy(model(images[schedule.test_rows]), schedule.test_rows)


def execute(run: Run) -> Result:
    """Train and score one run; what a worker process calls."""
    if run.method not in METHODS:
        raise ValueError(f"unknown method {run.method!r}; choose one of {', '.join(METHODS)}")
    started = time.perf_counter()
    images_np, labels_np = _digits()
    images, labels = torch.from_numpy(images_np), torch.from_numpy(labels_np)
    job = job_for(run)
    pieces = party_pieces(images, conv.geometry(job))
    if run.method == "Centralised":
        accuracy = _train_end_to_end(job, images, labels)
    elif run.method == "Non-cooperation":
        piece = pieces[ACTIVE_PARTY].reshape(len(images), 1, IMAGE_SIDE // 2, IMAGE_SIDE // 2)
        accuracy = _train_end_to_end(job, piece, labels)
    else:
        accuracy = _train_federated(run, job, pieces, labels.to(torch.float64))
    return Result(run, accuracy, time.perf_counter() - started)
