"""The seed papers' own settings, in process: where each algorithm lands against its authors' figures.

``shared/ORACLES.md`` §1 gives what the VIM authors' code (``AI-secure/VFL-ADMM``) reaches on
sklearn's digits, with its data, layout, models and settings. This check trains each
algorithm's in-process reference (``vflalgorithms/<name>/reference.py``, which the equivalence
tests tie to the federated run) the same way and prints its accuracy after R rounds beside theirs:

- data: digits, the authors' stratified 70/30 split (``random_state=0``), 125 of the training rows
  (the first 10 % after ``RandomState(seed)`` shuffles them) left out as their validation rows,
  pixels ``/16`` then ``(x - 0.3056) / 0.3761``;
- layout: a labels-only active party and 4 passive parties of 2 image rows each;
- models: each party's ``ConMLP`` (16 -> 120 -> 60, a ReLU after both), embedding 60;
- settings: batch 256, ``optimizer = "sgd"`` (the bottoms), ``top_optimizer = "plain_sgd"`` (the
  server's model and heads), weight decay 1e-3, rho 1, tau 20.

It is a check, not ``make bench-oracles`` (issue 47, part 5): the references reshuffle the rows every
epoch where the authors keep one order, nothing crosses a wire, and one seed is the default.
Run: ``python -m bench.algorithms.oracle_check --algorithms vimadmm --epochs 100``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from bench.common.versions import versions_line
from vflalgorithms.base import algorithm_spec
from vflcore.job import JobSpec, model_seed
from vflcore.ml.models import build_seeded
from vflcore.ml.optimizers import role_optimizer

ROUNDS = (5, 10, 25, 50, 100, 250, 500)
#: Batch 256 over the authors' 1132 training rows: 5 rounds an epoch.
ROUNDS_PER_EPOCH = 5


@dataclass(frozen=True)
class Row:
    """One row of ORACLES.md §1: the algorithm, its options, and the authors' mean accuracy (%) after R rounds."""

    algorithm: str
    learning_rate: float
    options: dict[str, object]
    authors: dict[int, float]
    final: str
    top_hidden: tuple[int, ...] = ()
    top_dropout: float = 0.0


ROWS = {
    "vimsgd": Row(
        "vimsgd", 0.3, {}, {5: 72.7, 10: 83.2, 25: 91.6, 50: 96.6, 100: 97.6, 250: 98.0, 500: 98.1}, "98.09 ± 0.47"
    ),
    "vimadmm": Row(
        "vimadmm",
        0.1,
        {"rho": 1.0, "local_steps": 20},
        {5: 96.3, 10: 97.5, 25: 98.1, 50: 98.3, 100: 98.4, 250: 98.3, 500: 98.5},
        "98.46 ± 0.21",
    ),
    "vimadmm_j": Row(
        "vimadmm_j",
        0.1,
        {"rho": 1.0, "local_steps": 20},
        {5: 96.9, 10: 97.6, 25: 98.1, 50: 98.5, 100: 98.3, 250: 98.1, 500: 97.0},
        "96.98 ± 1.39",
    ),
    "splitnn": Row(
        "splitnn",
        0.2,
        {},
        {5: 41.0, 10: 59.6, 25: 72.0, 50: 94.3, 100: 96.7, 250: 97.9, 500: 97.9},
        "97.90 ± 0.28",
        top_hidden=(240,),
        top_dropout=0.25,
    ),
}


class ConMLP(nn.Module):
    """The VIM authors' client model as ORACLES.md describes it: two linear layers, a ReLU after each."""

    def __init__(self, inputs: int, embedding: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(inputs, 120)
        self.out = nn.Linear(120, embedding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.out(torch.relu(self.hidden(x))))


def oracle_data(seed: int) -> tuple[dict[int, torch.Tensor], torch.Tensor, int]:
    """(features per party, labels, training rows): the training rows first, then the 540 test rows."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data / 16.0, digits.target, test_size=0.3, stratify=digits.target, random_state=0
    )
    order = np.random.RandomState(seed).permutation(len(x_train))[len(x_train) // 10 :]  # their validation rows out
    x = (np.concatenate([x_train[order], x_test]) - 0.3056) / 0.3761
    labels = torch.tensor(np.concatenate([y_train[order], y_test]), dtype=torch.float64)
    images = x.reshape(-1, 8, 8)
    features = {1: torch.zeros(len(x), 0)}
    for k in range(4):
        strip = images[:, 2 * k : 2 * k + 2, :].reshape(len(x), 16)
        features[2 + k] = torch.tensor(strip, dtype=torch.float32)
    return features, labels, len(order)


def run(row: Row, epochs: int, seed: int) -> list[float]:
    """Train ``row``'s reference for ``epochs``; its test accuracy (%) after every epoch (5 rounds)."""
    features, labels, train = oracle_data(seed)
    job = JobSpec(
        job_id=f"oracle-{row.algorithm}",
        algorithm=row.algorithm,
        seed=seed,
        batch_size=256,
        epochs=epochs,
        embedding_dim=60,
        optimizer="sgd",
        top_optimizer="plain_sgd",
        learning_rate=row.learning_rate,
        weight_decay=1e-3,
        test_fraction=0.3,
        num_rows=len(labels),
        passive_parties=(2, 3, 4, 5),
        algorithm_options=dict(row.options),
    )
    reference = algorithm_spec(row.algorithm).reference_class()(
        job, features, labels, top_hidden=row.top_hidden, top_dropout=row.top_dropout
    )
    for party in job.passive_parties:  # the authors' client model, seeded as the party seeds its own
        reference.bottoms[party] = build_seeded(lambda: ConMLP(16, 60), model_seed(seed, party, "bottom"))
        reference.bottom_optimizers[party] = role_optimizer(job, "bottom", reference.bottoms[party].parameters())
    reference.schedule.train_rows = np.arange(train)
    reference.schedule.test_rows = np.arange(train, len(labels))
    test = reference.schedule.test_rows
    accuracies = []
    for epoch in range(epochs):
        reference.train_epoch(epoch)
        with torch.no_grad():
            predicted = reference.predict(test).argmax(dim=1).numpy()
        accuracies.append(100.0 * float(np.mean(predicted == labels[test].numpy())))
        if not np.isfinite(reference.step_losses[-1]):
            break
    return accuracies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--epochs", type=int, default=100, help="5 rounds each; the authors ran 100")
    parser.add_argument("--seeds", default="100", help="comma-separated; the authors used 100,200,300")
    args = parser.parse_args()
    print("oracle check: in-process references at the VIM authors' digits settings (shared/ORACLES.md §1)")
    print(versions_line("torch", "numpy", "scikit-learn"))
    for name in args.algorithms.split(","):
        row = ROWS[name]
        for seed in (int(s) for s in args.seeds.split(",")):
            start = time.perf_counter()
            accuracies = run(row, args.epochs, seed)
            shown = [r for r in ROUNDS if r <= ROUNDS_PER_EPOCH * len(accuracies)]
            ours = " ".join(f"{accuracies[r // ROUNDS_PER_EPOCH - 1]:.1f}/{row.authors[r]:.1f}" for r in shown)
            print(
                f"{name:10s} seed {seed}: after R rounds (ours/authors') {ours}; "
                f"final {accuracies[-1]:.2f} (authors {row.final} at 500); {time.perf_counter() - start:.0f} s"
            )


if __name__ == "__main__":
    main()
