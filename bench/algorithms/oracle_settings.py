"""The VIM authors' digits settings (``shared/ORACLES.md`` §1): their figures, their data, their client model.

``make bench-oracles`` (``bench.algorithms.oracles``) runs each row through the real daemons; its
``--inprocess`` mode runs the in-process references with the authors' own split. Both take from here:

- data: digits, pixels ``/16`` then ``(x - 0.3056) / 0.3761``;
- layout: a labels-only active party and 4 passive parties of 2 image rows each;
- models: each passive party's ``ConMLP`` (16 -> 120 -> 60, a ReLU after both), embedding 60;
- settings: batch 256, ``optimizer = "sgd"`` (the bottoms, momentum 0.9), ``top_optimizer =
  "plain_sgd"`` (the server's model and heads), weight decay 1e-3, rho 1, tau 20;
- split: their stratified 70/30 (``random_state=0``): the service tests on their 540 rows (the
  active party's ``held_out_ids``), and sets 10 % of the rest aside for validation, as they do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vflcore.job.spec import JobSpec
from vfltesting.datasets import example_id, write_vertical_split

PASSIVE = (2, 3, 4, 5)
#: Batch 256 over the authors' 1132 training rows: 5 rounds an epoch.
ROUNDS_PER_EPOCH = 5
#: The rounds ORACLES.md reports accuracy after (the service scores every round: ``eval_every_rounds = 1``).
ROUNDS = (5, 10, 25, 50, 100, 250, 500)
#: The factory every passive party builds its bottom model with (``[model] factory``).
FACTORY = "bench.algorithms.oracle_settings:ConMLP"


@dataclass(frozen=True)
class Authors:
    """One row's figures from ORACLES.md: mean ± std over seeds 100, 200, 300."""

    final: tuple[float, float]
    best: tuple[float, float]
    to_90: tuple[float, float]
    to_95: tuple[float, float]
    #: Mean accuracy (%) after R rounds, where the table gives it.
    after: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One row of ORACLES.md §1: the job's algorithm and settings, and the authors' figures."""

    name: str
    algorithm: str
    learning_rate: float
    authors: Authors
    options: dict[str, object] = field(default_factory=dict)
    top_hidden: tuple[int, ...] = ()
    top_dropout: float = 0.0


ADMM: dict[str, object] = {"rho": 1.0, "local_steps": 20}
ROWS = {
    row.name: row
    for row in (
        Row(
            "vimsgd",
            "vimsgd",
            0.3,
            Authors(
                (98.09, 0.47),
                (98.27, 0.28),
                (23, 3),
                (33, 6),
                {5: 72.7, 10: 83.2, 25: 91.6, 50: 96.6, 100: 97.6, 250: 98.0, 500: 98.1},
            ),
        ),
        Row(
            "vimadmm",
            "vimadmm",
            0.1,
            Authors(
                (98.46, 0.21),
                (98.58, 0.11),
                (2, 0),
                (4, 1),
                {5: 96.3, 10: 97.5, 25: 98.1, 50: 98.3, 100: 98.4, 250: 98.3, 500: 98.5},
            ),
            ADMM,
        ),
        Row(
            "vimadmm_j",
            "vimadmm_j",
            0.1,
            Authors(
                (96.98, 1.39),
                (98.70, 0.0),
                (2, 0),
                (3, 1),
                {5: 96.9, 10: 97.6, 25: 98.1, 50: 98.5, 100: 98.3, 250: 98.1, 500: 97.0},
            ),
            ADMM,
        ),
        Row(
            "splitnn",
            "splitnn",
            0.2,
            Authors(
                (97.90, 0.28),
                (98.40, 0.28),
                (33, 3),
                (54, 8),
                {5: 41.0, 10: 59.6, 25: 72.0, 50: 94.3, 100: 96.7, 250: 97.9, 500: 97.9},
            ),
            top_hidden=(240,),
            top_dropout=0.25,
        ),
        Row("fedbcd_q5", "fedbcd", 0.01, Authors((96.73, 0.21), (96.91, 0.11), (40, 7), (101, 14)), {"local_steps": 5}),
        Row("fedbcd_q20", "fedbcd", 0.01, Authors((97.47, 0.11), (97.47, 0.11), (15, 2), (36, 4)), {"local_steps": 20}),
    )
}


class ConMLP(nn.Module):
    """The VIM authors' client model as ORACLES.md describes it: two linear layers, a ReLU after each.

    A ``[model] factory``: called as ``ConMLP(num_features, embedding_dim)``.
    """

    def __init__(self, inputs: int, embedding: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(inputs, 120)
        self.out = nn.Linear(120, embedding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.relu(self.out(torch.relu(self.hidden(x))))
        return out


def oracle_job(row: Row, seed: int, epochs: int) -> JobSpec:
    """The job of ``row``: the authors' batch, embedding, optimizers per role, weight decay and options."""
    return JobSpec(
        job_id=f"oracle-{row.name.replace('_', '-')}-{seed}",
        algorithm=row.algorithm,
        seed=seed,
        batch_size=256,
        epochs=epochs,
        embedding_dim=60,
        optimizer="sgd",
        top_optimizer="plain_sgd",
        learning_rate=row.learning_rate,
        weight_decay=1e-3,
        test_fraction=0.3,  # the size of theirs; the service's test rows are theirs (``write_oracle_data``)
        validation_fraction=0.1,  # their 10 % of the training rows, left out of training
        eval_every_rounds=1,  # scored every round, as their curves are
        passive_parties=PASSIVE,
        algorithm_options=dict(row.options),
    )


def _pixels() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data / 16.0, digits.target


def _standardise(x: np.ndarray) -> np.ndarray:
    return (x - 0.3056) / 0.3761


def authors_split() -> tuple[np.ndarray, np.ndarray]:
    """(training rows, test rows) of digits as the authors split it: stratified 70/30, ``random_state=0``.

    ``train_test_split`` shuffles by the row count and the labels alone, so splitting the row
    numbers gives the rows their split of the arrays holds.
    """
    from sklearn.model_selection import train_test_split

    _, target = _pixels()
    train, test = train_test_split(np.arange(len(target)), test_size=0.3, stratify=target, random_state=0)
    return np.asarray(train), np.asarray(test)


def write_oracle_data(out: Path) -> Path:
    """``party1.csv`` (labels only), ``party2-5.csv`` (2 image rows each), standardised as the authors do,
    and ``test_ids.txt``: the IDs of their 540 test rows; returns its path."""
    pixels, labels = _pixels()
    names = [f"r{row}c{col}" for row in range(8) for col in range(8)]
    columns: list[list[int]] = [[]] + [[row * 8 + col for row in rows for col in range(8)] for rows in _STRIPS]
    write_vertical_split(
        out, features=_standardise(pixels), labels=labels, feature_names=names, party_columns=columns, seed=0
    )
    test_ids = out / "test_ids.txt"
    test_ids.write_text("".join(f"{example_id(int(row))}\n" for row in authors_split()[1]), encoding="utf-8")
    return test_ids


_STRIPS = ((0, 1), (2, 3), (4, 5), (6, 7))


def oracle_tensors(seed: int) -> tuple[dict[int, torch.Tensor], torch.Tensor, int]:
    """(features per party, labels, training rows) with the authors' own split, for the in-process references.

    Their stratified 70/30 split (``random_state=0``); of the training rows, the first 10 % after
    ``RandomState(seed)`` shuffles them are their validation rows, left out. Training rows first,
    then the 540 test rows.
    """
    pixels, target = _pixels()
    train, test = authors_split()
    x_train, x_test, y_train, y_test = pixels[train], pixels[test], target[train], target[test]
    order = np.random.RandomState(seed).permutation(len(x_train))[len(x_train) // 10 :]
    images = _standardise(np.concatenate([x_train[order], x_test])).reshape(-1, 8, 8)
    labels = torch.tensor(np.concatenate([y_train[order], y_test]), dtype=torch.float64)
    features = {1: torch.zeros(len(images), 0)}
    for party, rows in zip(PASSIVE, _STRIPS, strict=True):
        strip = images[:, rows[0] : rows[1] + 1, :].reshape(len(images), 16)
        features[party] = torch.tensor(strip, dtype=torch.float32)
    return features, labels, len(order)
