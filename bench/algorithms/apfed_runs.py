"""One run of the APFed experiment (``bench.algorithms.apfed``): a digits setting, a method and a seed in, accuracy out.

Every method trains through the project's own in-process references, so the experiment measures
the code the product runs: APFed-R and APFed-C through ``ReferenceAPFed``, SingleVL through the
same class with no passive party (λ = 0 is the same thing; ``tests/unit/vflalgorithms/test_apfed.py`` checks
that), and the three TVFL baselines through one ``ReferenceSplitNN`` trained with every party and
then asked to infer with the passive parties gone. A run is a small frozen value so that it can
cross to a worker process and come back as the key of its result.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits

from vflalgorithms.apfed.maths import APFED_C, APFED_R
from vflalgorithms.apfed.reference import ReferenceAPFed
from vflalgorithms.splitnn.reference import ReferenceSplitNN
from vflcore.job.spec import ACTIVE_PARTY, JobSpec

#: Horizontal strips of the 8x8 digit (pixel rows) for m = 2 and m = 3 views, as in the paper's Fig. 2.
STRIPS: dict[int, tuple[tuple[int, ...], ...]] = {
    2: ((0, 1, 2, 3), (4, 5, 6, 7)),
    3: ((0, 1, 2), (3, 4, 5), (6, 7)),
}
SETTINGS = ("2-1", "2-2", "3-1", "3-2", "3-3")
#: The passive parties, in the order they take the views the active party does not hold.
PASSIVE = (2, 3)

# One architecture and one optimizer for every method (see bench.algorithms.apfed for where each comes from).
EPOCHS = 300
BATCH_SIZE = 256
LEARNING_RATE = 0.05
WEIGHT_DECAY = 1e-4  # the paper's L2 regularisers (Table 1) at Table 3's 1e-4
EMBEDDING_DIM = 64
BOTTOM_HIDDEN = (256,)
TOP_HIDDEN = (256,)  # g_T = fc(64, 256), fc(256, 10) as in Table 3; SplitNN's top the same over 3 embeddings
TOP_DROPOUT = 0.5  # after g_T's hidden layer, as in the authors' task network
TEMPERATURE = 1.0  # APFed-C's contrastive loss, the authors' default

#: What a run trains. "single" is SingleVL; "tvfl" is SplitNN, scored as TVFL-0, TVFL-A and TVFL-R.
KINDS = ("apfed_r", "apfed_c", "single", "tvfl")


@dataclass(frozen=True)
class Run:
    """One training run: ``weight`` is λ for every passive party (APFed only)."""

    setting: str
    kind: str
    seed: int
    weight: float = 1.0


@dataclass(frozen=True)
class Result:
    """A run's held-out accuracies (fractions), by method label, and its wall time."""

    run: Run
    accuracy: dict[str, float]
    seconds: float


@functools.cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's 1797 8x8 digits, pixels scaled to [0, 1], and their labels; loaded once per process."""
    digits = load_digits()
    return digits.data.astype(np.float32) / 16.0, digits.target.astype(np.int64)


def party_views(setting: str) -> dict[int, torch.Tensor]:
    """Setting "m-i": party 1 holds strip i of m, parties 2 and 3 the other strips top to bottom."""
    views, active = (int(part) for part in setting.split("-"))
    strips = STRIPS[views]
    order = [active - 1] + [k for k in range(views) if k != active - 1]
    pixels, _ = _digits()
    parties = (ACTIVE_PARTY, *PASSIVE)
    return {
        party: torch.from_numpy(np.ascontiguousarray(pixels[:, [r * 8 + c for r in strips[k] for c in range(8)]]))
        for party, k in zip(parties, order, strict=False)
    }


def shared_job(
    job_id: str,
    algorithm: str,
    seed: int,
    *,
    num_rows: int,
    passive: tuple[int, ...],
    options: dict[str, float],
    task: str = "classification",
    epochs: int = EPOCHS,
) -> JobSpec:
    """A job with the hyperparameters every method shares (this bench's and ``bench.algorithms.distill``'s)."""
    return JobSpec(
        job_id=job_id,
        algorithm=algorithm,
        task=task,
        seed=seed,
        epochs=epochs,
        batch_size=BATCH_SIZE,
        embedding_dim=EMBEDDING_DIM,
        bottom_hidden=BOTTOM_HIDDEN,
        optimizer="sgd",
        learning_rate=LEARNING_RATE,
        weight_decay=WEIGHT_DECAY,
        test_fraction=0.2,
        num_rows=num_rows,
        passive_parties=passive,
        algorithm_options=options,
    )


def job_for(run: Run, passive: tuple[int, ...]) -> JobSpec:
    """The job of ``run``: the shared hyperparameters, the run's seed (model init and train/test split)."""
    algorithm = {"apfed_r": APFED_R, "apfed_c": APFED_C, "single": APFED_R, "tvfl": "splitnn"}[run.kind]
    options: dict[str, float] = {} if run.kind == "tvfl" else {"weight": 0.0 if run.kind == "single" else run.weight}
    if run.kind == "apfed_c":
        options["temperature"] = TEMPERATURE
    job_id = f"apfed-{run.setting}-{run.kind}-{run.seed}"
    return shared_job(job_id, algorithm, run.seed, num_rows=len(_digits()[1]), passive=passive, options=options)


def _accuracy(logits: torch.Tensor, rows: np.ndarray) -> float:
    return float((logits.argmax(dim=1).numpy() == _digits()[1][rows]).mean())


def _train_apfed(run: Run, views: dict[int, torch.Tensor], labels: torch.Tensor) -> dict[str, float]:
    """APFed-R, APFed-C or SingleVL (no passive party at all), scored on the active party alone (Eq. 11)."""
    passive = () if run.kind == "single" else tuple(p for p in PASSIVE if p in views)
    job = job_for(run, passive)
    model = ReferenceAPFed(
        job, {p: views[p] for p in (ACTIVE_PARTY, *passive)}, labels, top_hidden=TOP_HIDDEN, top_dropout=TOP_DROPOUT
    )
    for epoch in range(job.epochs):
        model.train_epoch(epoch)
    test = model.schedule.test_rows
    label = {"apfed_r": "APFed-R", "apfed_c": "APFed-C", "single": "SingleVL"}[run.kind]
    return {label: _accuracy(model.predict(test), test)}


def _train_tvfl(run: Run, views: dict[int, torch.Tensor], labels: torch.Tensor) -> dict[str, float]:
    """SplitNN trained with every party, then inferred by the active party with each passive embedding replaced.

    TVFL-0 puts zeros there, TVFL-A the mean of that party's embeddings of the training rows, and
    TVFL-R standard normal noise (seeded by the run). "TVFL (all)" keeps every party, for reference.
    """
    job = job_for(run, tuple(p for p in PASSIVE if p in views))
    model = ReferenceSplitNN(job, views, labels, top_hidden=TOP_HIDDEN, top_dropout=TOP_DROPOUT)
    for epoch in range(job.epochs):
        model.train_epoch(epoch)
    schedule = model.schedule
    test, passive = schedule.test_rows, model.passive
    for module in [model.top, *model.bottoms.values()]:
        module.eval()
    noise = torch.Generator().manual_seed(run.seed)
    with torch.no_grad():
        embeddings = {p: model.bottoms[p](views[p]) for p in passive}
        shape = (len(test), job.embedding_dim)
        replaced = {
            "TVFL-0": [torch.zeros(shape) for _ in passive],
            "TVFL-A": [embeddings[p][schedule.train_rows].mean(dim=0).expand(shape) for p in passive],
            "TVFL-R": [torch.randn(shape, generator=noise) for _ in passive],
            "TVFL (all)": [embeddings[p][test] for p in passive],
        }
        return {label: _accuracy(model._top(test, stand_ins), test) for label, stand_ins in replaced.items()}


def execute(run: Run) -> Result:
    """Train and score one run; what a worker process calls."""
    if run.kind not in KINDS:
        raise ValueError(f"unknown run kind {run.kind!r}; choose one of {', '.join(KINDS)}")
    started = time.perf_counter()
    views = party_views(run.setting)
    labels = torch.from_numpy(_digits()[1].astype(np.float64))
    train = _train_tvfl if run.kind == "tvfl" else _train_apfed
    accuracy = train(run, views, labels)
    return Result(run, accuracy, time.perf_counter() - started)
