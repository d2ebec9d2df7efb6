"""Write vertically split example datasets: one CSV per party, sharing IDs but not row order.

Examples, tests and benchmarks need data laid out the way real parties hold it: party 1 (active)
has the labels and maybe some features, parties 2, 3, ... have the rest, every file has an `id`
column, and each party's rows come in its own order so that alignment is actually exercised.
Only offline data is used: scikit-learn's bundled datasets and `make_classification`.

The IDs are the kind banks hold (``example_id``): e-mail-like customer IDs of 24 bytes or more
that share a long domain, and every seventh one non-ASCII (German, Cyrillic, Japanese). Short
ASCII IDs the project made up itself hid a numpy bug that refused every real ID of 16 bytes or
more (issue 36), so every test on these datasets runs on IDs like users' instead.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, make_classification

__all__ = [
    "example_id",
    "example_ids",
    "write_diabetes_split",
    "write_digits_split",
    "write_synthetic_split",
    "write_vertical_split",
]

# Horizontal strips of the 8x8 digit, as in APFed's m-i settings: rows 0-2 / 3-5 / 6-7.
_DIGIT_STRIPS = ((0, 1, 2), (3, 4, 5), (6, 7))
# Diabetes's 10 features: party 1 gets 0-3 (with the target), party 2 gets 4-6, party 3 gets 7-9.
_DIABETES_PARTS = ((0, 1, 2, 3), (4, 5, 6), (7, 8, 9))

#: The e-mail domain most example IDs share, as a bank's customer addresses do: a long common
#: suffix, after a common ``cust-000`` prefix.
_DOMAIN = "retail-banking.example.com"
#: Every seventh example ID is one of these in turn: non-ASCII in the local part, the domain or both.
_NON_ASCII_IDS = (
    "müller.jürgen.{number}@bank.example.de",
    "иванова.ольга.{number}@банк.пример.рф",
    "顧客{number}@銀行.例え.jp",
    "zoë.ångström.{number}@bank.example.se",
)
#: Characters that make a CSV cell need quotes (RFC 4180), spaces included so that no reader
#: that trims cells can change an ID.
_NEEDS_QUOTES = frozenset(',"\r\n ')


def example_id(row: int) -> str:
    """The customer ID of example row ``row``: the same every run, distinct for every row.

    Mostly ``cust-0000123@retail-banking.example.com`` (39 bytes, leading zeros kept); rows 6,
    13, 20, ... take the non-ASCII forms in turn (``müller.jürgen.0000006@bank.example.de``, a
    Cyrillic and a Japanese address, ...), all of 24 bytes or more in UTF-8.
    """
    number = f"{row:07d}"
    if row % 7 == 6:
        return _NON_ASCII_IDS[(row // 7) % len(_NON_ASCII_IDS)].format(number=number)
    return f"cust-{number}@{_DOMAIN}"


def example_ids(rows: int) -> list[str]:
    """``example_id`` of rows 0 .. rows - 1."""
    return [example_id(row) for row in range(rows)]


def write_vertical_split(
    out_dir: Path,
    *,
    features: np.ndarray,
    labels: np.ndarray,
    feature_names: Sequence[str],
    party_columns: Sequence[Sequence[int]],
    seed: int,
    ids: Sequence[str] | None = None,
    keep: Sequence[float] | None = None,
) -> list[Path]:
    """Write `party{k}.csv` for each entry of party_columns and return the paths in party order.

    Sample i gets the ID ``ids[i]``, by default ``example_id(i)``; any string works, since cells
    are quoted where CSV needs it. Party 1's file holds `id`, `label` and its
    columns; the others hold `id` and theirs. Each file's rows are in a different seeded order.
    With ``keep``, party k holds only a random ``keep[k-1]`` share of the samples, as real
    parties do: PSI then finds the samples they share.
    Integer labels are written as integers, float labels with full float64 precision; features
    are written at float32 precision, which is what `read_party_csv` loads.
    """
    features = np.asarray(features)
    labels = np.asarray(labels)
    _check_split(features, labels, feature_names, party_columns)
    num_rows = features.shape[0]
    ids = example_ids(num_rows) if ids is None else list(ids)
    if len(ids) != num_rows or len(set(ids)) != num_rows:
        raise ValueError(
            f"ids must be {num_rows} distinct strings, one per row, got {len(set(ids))} distinct of {len(ids)}"
        )
    label_format = "%d" if np.issubdtype(labels.dtype, np.integer) else "%.17g"
    rng = np.random.default_rng(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    if keep is not None and (len(keep) != len(party_columns) or not all(0 < k <= 1 for k in keep)):
        raise ValueError(f"keep needs one share in (0, 1] per party, got {list(keep)}")
    for party, columns in enumerate(party_columns, start=1):
        path = out_dir / f"party{party}.csv"
        share = 1.0 if keep is None else keep[party - 1]
        _write_party(
            path,
            ids=ids,
            order=rng.permutation(num_rows)[: round(share * num_rows)],
            features=features[:, list(columns)].astype(np.float32),
            names=[feature_names[c] for c in columns],
            labels=(labels, label_format) if party == 1 else None,
        )
        paths.append(path)
    return paths


#: Share of the samples each party holds in the example data: PSI finds the ~65 % they share.
EXAMPLE_KEEP = (0.9, 0.85, 0.85)


def write_digits_split(out_dir: Path, *, seed: int = 0, keep: Sequence[float] | None = EXAMPLE_KEEP) -> list[Path]:
    """Split sklearn's 8x8 digits (1797 rows) into three horizontal strips, pixels scaled to [0, 1].

    By default each party holds only part of the samples (``EXAMPLE_KEEP``); ``keep=None`` gives
    every party every sample.
    """
    digits = load_digits()
    features = digits.data.astype(np.float64) / 16.0
    names = [f"r{row}c{col}" for row in range(8) for col in range(8)]
    strips = [[row * 8 + col for row in rows for col in range(8)] for rows in _DIGIT_STRIPS]
    labels = digits.target.astype(np.int64)
    return write_vertical_split(
        out_dir, features=features, labels=labels, feature_names=names, party_columns=strips, seed=seed, keep=keep
    )


def digit_quadrants() -> list[list[int]]:
    """Pixel columns of the four 4x4 quadrants of an 8x8 digit, row-major within each quadrant.

    Row-major order of the grid: top-left, top-right, bottom-left, bottom-right (AdptVFedConv's
    default piece positions for parties 1, 2, 3, 4).
    """
    return [[row * 8 + col for row in range(r0, r0 + 4) for col in range(c0, c0 + 4)] for r0 in (0, 4) for c0 in (0, 4)]


def write_digits_quadrants(out_dir: Path, *, seed: int = 0, keep: Sequence[float] | None = None) -> list[Path]:
    """Split the 8x8 digits into four 4x4 quadrants for parties 1-4 (party 1: labels + top-left)."""
    digits = load_digits()
    names = [f"r{row}c{col}" for row in range(8) for col in range(8)]
    return write_vertical_split(
        out_dir,
        features=digits.data.astype(np.float64) / 16.0,
        labels=digits.target.astype(np.int64),
        feature_names=names,
        party_columns=digit_quadrants(),
        seed=seed,
        keep=keep,
    )


def write_diabetes_split(out_dir: Path, *, seed: int = 0) -> list[Path]:
    """Split sklearn's diabetes regression set (442 rows, 10 features) across three parties.

    Features and target are standardised (zero mean, unit variance) so that one learning rate
    suits every party's columns and the MSE is on a readable scale.
    """
    diabetes = load_diabetes(scaled=False)
    features = _standardise(diabetes.data.astype(np.float64))
    target = _standardise(diabetes.target.astype(np.float64).reshape(-1, 1))[:, 0]
    return write_vertical_split(
        out_dir,
        features=features,
        labels=target,
        feature_names=list(diabetes.feature_names),
        party_columns=_DIABETES_PARTS,
        seed=seed,
    )


def write_cancer_split(out_dir: Path, *, seed: int = 0) -> list[Path]:
    """Split sklearn's breast cancer set (569 rows, 30 features, binary) 10/10/10 across three parties.

    Standardised, every row kept: the binary task the privacy probes and defences are tested on,
    since the norm and Marvell's defence are defined for two classes.
    """
    data = load_breast_cancer()
    return write_vertical_split(
        out_dir,
        features=_standardise(data.data.astype(np.float64)),
        labels=data.target.astype(np.int64),
        feature_names=[f"f{i}" for i in range(data.data.shape[1])],
        party_columns=[range(0, 10), range(10, 20), range(20, 30)],
        seed=seed,
    )


def write_synthetic_split(
    out_dir: Path,
    *,
    rows: int,
    features_per_party: Sequence[int],
    seed: int,
    classes: int = 2,
) -> list[Path]:
    """Write a `make_classification` dataset of any size, for benchmarks at scale (50k+ rows).

    features_per_party[0] is the active party's own feature count and may be 0 (labels only).
    Half the features are informative and sklearn shuffles columns, so every party holds some
    signal and no single party can reach full accuracy alone.
    """
    if len(features_per_party) < 2:
        raise ValueError("features_per_party needs an entry for the active party and at least one passive party")
    if any(count < 0 for count in features_per_party):
        raise ValueError(f"feature counts must be non-negative, got {list(features_per_party)}")
    total = sum(features_per_party)
    informative = min(total, max(2, total // 2))
    if total < 2 or classes > 2**informative:
        raise ValueError(f"{total} features are too few for {classes} classes; add features or use fewer classes")
    features, labels = make_classification(
        n_samples=rows,
        n_features=total,
        n_informative=informative,
        n_redundant=0,
        n_repeated=0,
        n_classes=classes,
        n_clusters_per_class=1,
        random_state=seed,
    )
    bounds = np.cumsum([0, *features_per_party])
    party_columns = [range(start, stop) for start, stop in itertools.pairwise(bounds)]
    return write_vertical_split(
        out_dir,
        features=features,
        labels=labels.astype(np.int64),
        feature_names=[f"f{i}" for i in range(total)],
        party_columns=party_columns,
        seed=seed,
    )


def _check_split(
    features: np.ndarray,
    labels: np.ndarray,
    feature_names: Sequence[str],
    party_columns: Sequence[Sequence[int]],
) -> None:
    if features.ndim != 2 or features.shape[0] < 1:
        raise ValueError(f"features must be a non-empty (rows, columns) array, got shape {features.shape}")
    if labels.shape != (features.shape[0],):
        raise ValueError(f"labels must have shape ({features.shape[0]},), got {labels.shape}")
    if len(feature_names) != features.shape[1]:
        raise ValueError(f"{len(feature_names)} feature names for {features.shape[1]} feature columns")
    if len(party_columns) < 2:
        raise ValueError("a vertical split needs the active party and at least one passive party")
    for party, columns in enumerate(party_columns, start=1):
        if any(not 0 <= c < features.shape[1] for c in columns):
            raise ValueError(f"party {party} has a column index outside 0..{features.shape[1] - 1}")
        if party > 1 and len(columns) == 0:
            raise ValueError(f"passive party {party} has no feature columns")


def _write_party(
    path: Path,
    *,
    ids: list[str],
    order: np.ndarray,
    features: np.ndarray,
    names: list[str],
    labels: tuple[np.ndarray, str] | None,
) -> None:
    """Write one party's CSV; rows are formatted with one %-format per line, fast at 100k+ rows.

    Only the ID cell can need quotes (numbers never do), so only it goes through `_csv_cell`.
    """
    header = ["id"] + (["label"] if labels is not None else []) + names
    row_format = ",".join(["%s"] + ([labels[1]] if labels is not None else []) + ["%.9g"] * len(names)) + "\n"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerow(header)
        for i in order:
            label_cell = () if labels is None else (labels[0][i].item(),)
            handle.write(row_format % (_csv_cell(ids[i]), *label_cell, *features[i].tolist()))


def _csv_cell(text: str) -> str:
    """``text`` as one CSV cell: quoted, inner quotes doubled, where a comma, quote, line break or space is in it."""
    if _NEEDS_QUOTES.isdisjoint(text):
        return text
    return '"' + text.replace('"', '""') + '"'


def _standardise(values: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance per column; constant columns are only centred."""
    std = values.std(axis=0)
    standardised: np.ndarray = (values - values.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return standardised
