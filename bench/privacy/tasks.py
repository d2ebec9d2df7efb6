"""The privacy bench's three tasks: what each party holds, and what the attacks are scored against.

- ``cancer``: scikit-learn's bundled breast-cancer set (569 rows, 30 features, 37 % malignant),
  a binary task the project's other tests and benches never use.
- ``imbalanced``: ``make_classification`` with 10 % positives (3,000 rows, 12 features). The
  norm attack is strongest here: the rare class's gradients are the large ones (Li et al., ICLR
  2022, §3), so this is the task the bench's target is set on.
- ``wine``: the bundled wine set (178 rows, 13 features, 3 classes), for the direction attack's
  multi-class form.

Features are standardised, then split by columns between the active party (the labels and the
first block) and passive parties 2 and 3. Every party holds every row, in its own order, so PSI
runs and alignment is exercised. The bench keeps the arrays: an attack's score is computed
against the truth here, by ID, never against anything a party sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_wine, make_classification

from vfltesting.datasets import example_ids, write_vertical_split

#: The passive party whose recording the probes attack (its features are what inversion recovers).
#: Party 3: on the imbalanced task party 2's four columns carry no signal about the label (each
#: party's columns alone, 3-fold CV ROC AUC of a gradient-boosted model: party 1 0.87, party 2
#: 0.48, party 3 0.74), and model completion on a party with nothing to complete measures nothing.
ATTACKED_PARTY = 3


@dataclass(frozen=True)
class Task:
    """One dataset, split between three parties, with the truth the attacks are scored against."""

    name: str
    features: np.ndarray
    labels: np.ndarray
    #: Columns of ``features`` held by party 1 (with the labels), 2 and 3.
    party_columns: tuple[tuple[int, ...], ...]

    @property
    def classes(self) -> int:
        return int(np.unique(self.labels).size)

    @property
    def binary(self) -> bool:
        return self.classes == 2

    @property
    def utility_metric(self) -> str:
        """What the job's final metrics are compared on: threshold-free ROC AUC if binary, else accuracy."""
        return "roc_auc" if self.binary else "accuracy"

    def write(self, folder: Path, seed: int = 0) -> Path:
        """``party1.csv`` (ids, labels, features), ``party2.csv``, ``party3.csv`` under ``folder``."""
        write_vertical_split(
            folder,
            features=self.features,
            labels=self.labels,
            feature_names=[f"f{i}" for i in range(self.features.shape[1])],
            party_columns=self.party_columns,
            seed=seed,
        )
        return folder

    def aligned(self, ids: list[str], party: int = ATTACKED_PARTY) -> tuple[np.ndarray, np.ndarray]:
        """Party ``party``'s features (as its CSV holds them: float32) and the labels, in the order of ``ids``."""
        row_of = {name: row for row, name in enumerate(example_ids(len(self.labels)))}
        rows = np.array([row_of[i] for i in ids], dtype=np.int64)
        columns = list(self.party_columns[party - 1])
        return self.features[rows][:, columns].astype(np.float32), self.labels[rows]


def _standardised(values: np.ndarray) -> np.ndarray:
    std = values.std(axis=0)
    scaled: np.ndarray = (values - values.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return scaled


def _thirds(columns: int) -> tuple[tuple[int, ...], ...]:
    """Columns 0..n-1 in three contiguous blocks, the first (the active party's) the smallest."""
    bounds = np.linspace(0, columns, 4).round().astype(int)
    return tuple(tuple(range(bounds[k], bounds[k + 1])) for k in range(3))


def cancer() -> Task:
    data = load_breast_cancer()
    features = _standardised(data.data.astype(np.float64))
    return Task("cancer", features, data.target.astype(np.int64), _thirds(features.shape[1]))


def imbalanced(rows: int = 3000) -> Task:
    features, labels = make_classification(
        n_samples=rows,
        n_features=12,
        n_informative=6,
        n_redundant=0,
        n_repeated=0,
        n_classes=2,
        n_clusters_per_class=2,
        weights=[0.9, 0.1],
        random_state=0,
    )
    return Task("imbalanced", _standardised(features), labels.astype(np.int64), _thirds(12))


def wine() -> Task:
    data = load_wine()
    features = _standardised(data.data.astype(np.float64))
    return Task("wine", features, data.target.astype(np.int64), _thirds(features.shape[1]))


#: Every task, by name, in the order the bench runs them.
TASKS = {"cancer": cancer, "imbalanced": imbalanced, "wine": wine}
