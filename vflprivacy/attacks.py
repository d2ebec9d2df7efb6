"""Attack probes: what a party can infer from the tensors it legitimately receives, as a number.

A claim that "no party sees another's raw data" is only as good as the attacks it survives, so
each attack here is written against what a party really holds after a job, and nothing else:

- a passive party holds, per training row, the answer the server sent for its upload (SplitNN's
  gradient ∂L/∂h^k, VIMADMM's dual λ) and its own trained bottom model. From those it may infer
  the active party's labels: by the answer's norm (``norm_attack``), by its direction given a few
  known labels (``direction_attack``, both from Li et al., "Label Leakage and Protection in
  Two-party Split Learning", ICLR 2022), or by fitting a head on its frozen bottom model with a
  handful of labels (``model_completion``, Fu et al., USENIX Security 2022);
- the active party holds every embedding a passive party sent. With a few of that party's rows in
  hand (features and IDs, from a leak or a public source) it may learn to invert them
  (``inversion``).

Every function is pure (arrays in, a figure out) and seeded, so the same recording gives the same
figure on any CPU. The glue that turns a job's recording into these arrays lives with the tests
(``vfltesting.privacy_probe``): it needs the algorithms' batch layout, which this floor may not import.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, RidgeCV
from sklearn.metrics import r2_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

#: Ridge penalties the inversion decoder chooses from by cross-validation on the auxiliary rows alone.
_DECODER_ALPHAS = (1e-6, 1e-4, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def roc_auc(positive: np.ndarray, scores: np.ndarray) -> float:
    """Plain ROC AUC of ``scores`` for the rows where ``positive`` holds: scikit-learn's ``roc_auc_score``'s value.

    Computed as the Mann-Whitney statistic from SciPy's ``rankdata`` (tied scores share their
    mean rank): the chance that a positive row outscores a negative one, a tie counting half,
    which equals the area under the ROC curve that ``roc_auc_score`` integrates. Here because
    ``roc_auc_score`` spent 95 % of its 7 ms a call on 455 rows validating its input, and a probe
    makes about 100 calls. Refuses NaN or infinite scores, as ``roc_auc_score`` does, and needs
    both classes.
    """
    positive = np.asarray(positive, dtype=bool).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(scores) != len(positive):
        raise ValueError(f"{len(scores)} scores for {len(positive)} labels")
    if not np.isfinite(scores).all():
        raise ValueError("Input contains NaN or infinity")
    n_positive = int(positive.sum())
    n_negative = len(positive) - n_positive
    if n_positive == 0 or n_negative == 0:
        raise ValueError("ROC AUC needs rows of both classes")
    ranks = rankdata(scores)  # 1-based, "average" for ties
    return float((ranks[positive].sum() - n_positive * (n_positive + 1) / 2.0) / (n_positive * n_negative))


def leak_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC of ``scores`` for the rows where ``positive`` holds, as max(AUC, 1 - AUC).

    A score that ranks the classes the wrong way round leaks as much as one that ranks them the
    right way: an attacker who knows a single row's label learns which way to read it. So 0.5
    means nothing leaks, and 1.0 means the labels are given away. NaN when only one class is present.
    """
    positive = np.asarray(positive, dtype=bool)
    if positive.all() or not positive.any():
        return math.nan
    auc = roc_auc(positive, scores)
    return max(auc, 1.0 - auc)


def _classes(labels: np.ndarray) -> np.ndarray:
    return np.unique(np.asarray(labels))


def minority(labels: np.ndarray) -> np.ndarray:
    """The rows of a binary task's rarer class (the larger label on a tie): the norm attack's positives."""
    classes, counts = np.unique(np.asarray(labels), return_counts=True)
    rare = classes[np.flatnonzero(counts == counts.min())[-1]]
    positives: np.ndarray = np.asarray(labels) == rare
    return positives


def norm_attack(gradients: np.ndarray, labels: np.ndarray) -> float:
    """Leak AUC of each row's gradient L2 norm for the minority class; binary tasks only.

    On an imbalanced task the model is less sure of the rare class, so its rows carry larger
    loss gradients (Li et al. §3.1). Multi-class: NaN, as the attack ranks rows by one number and
    a ranking splits two classes only (Li et al. define it for binary tasks).
    """
    if len(_classes(labels)) != 2:
        return math.nan
    norms = np.linalg.norm(np.asarray(gradients, dtype=np.float64).reshape(len(labels), -1), axis=1)
    return leak_auc(norms, minority(labels))


def _unit_rows(gradients: np.ndarray) -> np.ndarray:
    flat = np.asarray(gradients, dtype=np.float64).reshape(len(gradients), -1)
    norms = np.linalg.norm(flat, axis=1, keepdims=True)
    return flat / np.where(norms > 0, norms, 1.0)


def direction_attack(gradients: np.ndarray, labels: np.ndarray, known_per_class: int, seed: int) -> float:
    """AUC of ranking rows by the cosine of their gradient with the gradients of a few rows of known label.

    Gradients of one class point one way and those of the other the opposite way (Li et al. §3.2),
    so a single known row splits the rest.

    - Binary: the attacker knows ``known_per_class`` rows in total, drawn at random (k = 1: one
      row of a random class, as in Li et al.). A row's score is its mean cosine with the known
      rows of the larger label minus that with the known rows of the smaller one (a class with
      no known row contributes 0). Reported as ``leak_auc`` (max(AUC, 1 - AUC)) although the known
      labels already orient the score: a defence that only turns the ranking round has not
      protected the labels, since a second known label reads it the other way.
    - Multi-class: ``known_per_class`` known rows of every class; each row is scored per class by
      its mean cosine with that class's known rows; the figure is the macro one-vs-rest AUC (plain, per class).

    The known rows themselves are not scored. NaN with a single class.
    """
    labels = np.asarray(labels)
    classes = _classes(labels)
    if len(classes) < 2:
        return math.nan
    rng = np.random.default_rng(seed)
    if len(classes) == 2:
        known = rng.choice(len(labels), size=min(known_per_class, len(labels) - 1), replace=False)
    else:
        known = np.concatenate(
            [
                rng.choice(
                    np.flatnonzero(labels == c), size=min(known_per_class, int((labels == c).sum())), replace=False
                )
                for c in classes
            ]
        )
    unknown = np.setdiff1d(np.arange(len(labels)), known)
    cosines = _unit_rows(gradients)[unknown] @ _unit_rows(gradients)[known].T  # (unknown, known)
    per_class = np.stack(
        [
            cosines[:, labels[known] == c].mean(axis=1) if (labels[known] == c).any() else np.zeros(len(unknown))
            for c in classes
        ],
        axis=1,
    )
    truth = labels[unknown]
    if len(classes) == 2:
        return leak_auc(per_class[:, 1] - per_class[:, 0], truth == classes[1])
    aucs = [roc_auc(truth == c, per_class[:, i]) for i, c in enumerate(classes) if 0 < (truth == c).sum() < len(truth)]
    return float(np.mean(aucs))


def abs_direction_attack(gradients: np.ndarray, labels: np.ndarray, known_positives: int, seed: int) -> float:
    """Leak AUC of ranking rows by their mean |cosine| with a few known rows of the minority class; binary only.

    The sign-agnostic direction attack. A defence that balances the two classes' gradients on
    average (Marvell) can leave each positive row aligned with the known positive in *either* sign,
    while negatives sit near orthogonal to it: ``direction_attack`` reads that as chance, this one
    does not. The attacker knows ``known_positives`` rows of the minority class (at least 1).
    """
    labels = np.asarray(labels)
    if len(_classes(labels)) != 2:
        return math.nan
    positive = minority(labels)
    candidates = np.flatnonzero(positive)
    rng = np.random.default_rng(seed)
    known = rng.choice(candidates, size=max(1, min(known_positives, len(candidates) - 1)), replace=False)
    unknown = np.setdiff1d(np.arange(len(labels)), known)
    unit = _unit_rows(gradients)
    scores = np.abs(unit[unknown] @ unit[known].T).mean(axis=1)
    return leak_auc(scores, positive[unknown])


@dataclass(frozen=True)
class RelativeNorm:
    """The norm attack against each row's batch: a defence that scales a batch as a whole hides nothing from it."""

    #: Leak AUC of a row's norm divided by its batch's median norm.
    ratio: float
    #: Leak AUC of |ratio - 1|: how far a row stands out of its batch, in either direction.
    dispersion: float


def relative_norm_attack(gradients: np.ndarray, labels: np.ndarray, batch_of_row: np.ndarray) -> RelativeNorm:
    """Norm relative to the batch: each row's L2 norm over its batch's median, for the minority class; binary only.

    A party knows which rows came in one batch (it sent them), so it can compare a row with its
    neighbours: a per-batch noise scale or clipping floor that moves a whole batch's norms leaves
    their ratios, and a rare row whose gradient stands out of its batch still does.
    """
    labels = np.asarray(labels)
    if len(_classes(labels)) != 2:
        return RelativeNorm(math.nan, math.nan)
    norms = np.linalg.norm(np.asarray(gradients, dtype=np.float64).reshape(len(labels), -1), axis=1)
    batch_of_row = np.asarray(batch_of_row)
    ratio = np.empty_like(norms)
    for batch in np.unique(batch_of_row):
        rows = batch_of_row == batch
        median = float(np.median(norms[rows]))
        ratio[rows] = norms[rows] / median if median > 0 else 1.0
    positive = minority(labels)
    return RelativeNorm(leak_auc(ratio, positive), leak_auc(np.abs(ratio - 1.0), positive))


def epoch_average(epochs: dict[int, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's tensor averaged over every epoch given, as (rows, averages) in row order.

    A passive party knows its own IDs, so it can line up what it received for one row across
    epochs. Noise drawn afresh at every release averages away (by 1/sqrt(epochs) in scale) while
    what the labels put in the tensor does not, if it changes slowly: the attacks then read the
    averages. A row missing from some epochs is averaged over those it is in.
    """
    if not epochs:
        return np.arange(0), np.zeros((0, 0))
    first_rows, first_values = next(iter(epochs.values()))
    width = np.asarray(first_values).reshape(len(first_rows), -1).shape[1]
    size = 1 + max(int(rows.max()) for rows, _ in epochs.values() if len(rows))
    total, count = np.zeros((size, width)), np.zeros(size)
    for rows, values in epochs.values():
        np.add.at(total, rows, np.asarray(values, dtype=np.float64).reshape(len(rows), -1))
        np.add.at(count, rows, 1.0)
    seen = np.flatnonzero(count)
    return seen, total[seen] / count[seen, None]


def probe_attack(values: np.ndarray, labels: np.ndarray, known: np.ndarray) -> float:
    """A learned probe: logistic regression on the received rows with the labels of the ``known`` rows.

    Plain ROC AUC of the larger label's probability on every other row for a binary task (an
    attacker who fits the head knows which way it points), the mean one-vs-rest AUC for a
    multi-class one. Needs a known row of every class: NaN otherwise.
    """
    labels = np.asarray(labels)
    known = np.asarray(known)
    if len(_classes(labels[known])) < 2 or len(_classes(labels)) < 2:
        return math.nan
    flat = np.asarray(values, dtype=np.float64).reshape(len(labels), -1)
    others = np.setdiff1d(np.arange(len(labels)), known)
    scaler, head = _fitted_head(flat, labels, known)
    probabilities = head.predict_proba(scaler.transform(flat[others]))
    truth = labels[others]
    if probabilities.shape[1] == 2 and len(_classes(labels)) == 2:
        return leak_auc(probabilities[:, 1], truth == head.classes_[1])
    aucs = [
        roc_auc(truth == c, probabilities[:, i])
        for i, c in enumerate(head.classes_)
        if 0 < (truth == c).sum() < len(truth)
    ]
    return float(np.mean(aucs)) if aucs else math.nan


def known_rows(labels: np.ndarray, batch_of_row: np.ndarray | None, count: int, seed: int) -> np.ndarray:
    """The rows whose labels a probing attacker knows: one per batch (``batch_of_row`` given), else ``count``.

    Drawn at random, then one row of any class the draw missed is added, as an attacker who needs
    both classes to fit a head would look for one: without it, an imbalanced task's draw of 10
    rows often holds no positive and the probe would read NaN, not a leak.
    """
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    if batch_of_row is not None:
        chosen = {int(rng.choice(np.flatnonzero(batch_of_row == b))) for b in np.unique(batch_of_row)}
    else:
        chosen = set(rng.choice(len(labels), size=min(count, len(labels) - 1), replace=False).tolist())
    for c in _classes(labels):
        if not any(labels[i] == c for i in chosen):
            chosen.add(int(rng.choice(np.flatnonzero(labels == c))))
    return np.array(sorted(chosen), dtype=np.int64)


def cluster_attack(values: np.ndarray, labels: np.ndarray, seed: int) -> float:
    """Unsupervised: 2-means on the received rows' directions, scored by the better labelling; binary only.

    No known label at all: the attacker splits the rows in two and guesses which half is which.
    A row's score is how much nearer it sits to one centre than to the other; ``leak_auc`` takes
    the better of the two labellings, which one known row would settle.
    """
    from sklearn.cluster import KMeans  # only here: the other attacks do without it

    labels = np.asarray(labels)
    if len(_classes(labels)) != 2 or len(labels) < 3:
        return math.nan
    unit = _unit_rows(values)
    centres = KMeans(n_clusters=2, n_init=3, random_state=seed).fit(unit).cluster_centers_
    distances = np.linalg.norm(unit[:, None, :] - centres[None, :, :], axis=2)
    return leak_auc(distances[:, 0] - distances[:, 1], labels == _classes(labels)[1])


def label_attacks(values: np.ndarray, labels: np.ndarray, batch_of_row: np.ndarray, seed: int) -> dict[str, float]:
    """Every label attack on one set of received rows, and ``strongest``: their maximum.

    A defence is only as good as the best attack against it, so verdicts use ``strongest``. All
    figures are leak AUCs (0.5: nothing leaks); NaN where an attack does not apply (multi-class:
    the norm and cluster attacks), and left out of the maximum.
    """
    labels = np.asarray(labels)
    with threadpool_limits(1):  # a few hundred rows: one thread took 0.06 CPU-s per call, OpenMP's 0.23
        figures = _every_label_attack(values, labels, batch_of_row, seed)
    figures["strongest"] = strongest_of(figures.values())
    return figures


def strongest_of(figures: Iterable[float]) -> float:
    """The largest of ``figures`` that apply (NaN ones are attacks that do not); NaN if none does."""
    finite = [v for v in figures if not math.isnan(v)]
    return max(finite) if finite else math.nan


def _every_label_attack(
    values: np.ndarray, labels: np.ndarray, batch_of_row: np.ndarray, seed: int
) -> dict[str, float]:
    relative = relative_norm_attack(values, labels, batch_of_row)
    return {
        "norm": norm_attack(values, labels),
        "relative_norm": relative.ratio,
        "norm_dispersion": relative.dispersion,
        "direction_k1": direction_attack(values, labels, 1, seed),
        "abs_direction_k1": abs_direction_attack(values, labels, 1, seed),
        "probe_per_batch": probe_attack(values, labels, known_rows(labels, batch_of_row, 0, seed)),
        "probe_k10": probe_attack(values, labels, known_rows(labels, None, 10, seed)),
        "cluster": cluster_attack(values, labels, seed),
    }


def _labelled_rows(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """``fraction`` of the rows drawn at random, plus one row of any class the draw missed."""
    count = max(1, round(fraction * len(labels)))
    chosen = set(rng.choice(len(labels), size=count, replace=False).tolist())
    for c in _classes(labels):
        if not any(labels[i] == c for i in chosen):
            chosen.add(int(rng.choice(np.flatnonzero(labels == c))))
    return np.array(sorted(chosen), dtype=np.int64)


def _fitted_head(
    inputs: np.ndarray, labels: np.ndarray, known: np.ndarray
) -> tuple[StandardScaler, LogisticRegression]:
    """A logistic head on standardised inputs, fitted on the ``known`` rows.

    The scaler sees every row: the party holds all of its inputs, only the labels are scarce.
    """
    scaler = StandardScaler().fit(inputs)
    head = LogisticRegression(max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        head.fit(scaler.transform(inputs[known]), labels[known])
    return scaler, head


def _head_score(inputs: np.ndarray, labels: np.ndarray, known: np.ndarray, others: np.ndarray) -> float:
    """The attacker's head (``_fitted_head``) fitted on ``known``, scored on ``others``.

    Binary: the plain ROC AUC of the larger label's probability; multi-class: accuracy.
    """
    scaler, head = _fitted_head(inputs, labels, known)
    scaled = scaler.transform(inputs[others])
    classes = _classes(labels)
    if len(classes) == 2:
        if len(np.unique(labels[others])) < 2:
            return math.nan
        return roc_auc(labels[others] == classes[1], head.predict_proba(scaled)[:, 1])
    return float(np.mean(head.predict(scaled) == labels[others]))


@dataclass(frozen=True)
class Completion:
    """Model completion's figures: the head on the federated bottom model's embeddings, and on raw features.

    AUC for a binary task, accuracy for a multi-class one. ``federated - raw`` is what taking part
    in the federation taught the passive party about the labels.
    """

    federated: float
    raw: float


def model_completion(
    embeddings: np.ndarray, raw_features: np.ndarray, labels: np.ndarray, fraction: float, seed: int
) -> Completion:
    """A passive party's label inference with its frozen trained bottom model and a few labels (Fu et al.).

    The party learns the labels of ``fraction`` of its rows (at least one per class), fits a small
    head (logistic regression on standardised inputs) on them and predicts the rest. The same head,
    on the same rows, fitted on the party's raw features gives what it could infer without the
    federation; the embeddings carry what the active party's gradients taught its bottom model.
    """
    labels = np.asarray(labels)
    if len(_classes(labels)) < 2:
        return Completion(math.nan, math.nan)
    known = _labelled_rows(labels, fraction, np.random.default_rng(seed))
    others = np.setdiff1d(np.arange(len(labels)), known)
    flat = np.asarray(embeddings, dtype=np.float64).reshape(len(labels), -1)
    raw = np.asarray(raw_features, dtype=np.float64).reshape(len(labels), -1)
    return Completion(_head_score(flat, labels, known, others), _head_score(raw, labels, known, others))


@dataclass(frozen=True)
class Inversion:
    """How well the active party reconstructs a passive party's features from the embeddings it received.

    Errors are in units of each feature's standard deviation over the scored rows, so every
    feature weighs the same whatever its scale.
    """

    #: Mean squared reconstruction error over the scored rows and features.
    mse: float
    #: R² of each feature on the scored rows (1: exact; 0: no better than the feature's mean).
    r2: np.ndarray
    #: The mean of ``r2``.
    mean_r2: float
    #: The error of guessing each feature's mean over the auxiliary rows: what no embedding gives.
    baseline_mse: float


def inversion(embeddings: np.ndarray, features: np.ndarray, aux_fraction: float = 0.1, seed: int = 0) -> Inversion:
    """Feature inference by the active party, which holds ``aux_fraction`` of one passive party's rows.

    With those rows' features and IDs, it fits a decoder from the embeddings it received for
    them to their features (ridge regression on standardised embeddings, its penalty chosen by
    cross-validation on the auxiliary rows alone: few rows, so a linear decoder), then
    reconstructs every other row. Compared with guessing each feature's mean over the auxiliary rows.
    """
    flat = np.asarray(embeddings, dtype=np.float64).reshape(len(features), -1)
    features = np.asarray(features, dtype=np.float64).reshape(len(flat), -1)
    rng = np.random.default_rng(seed)
    aux = np.sort(rng.choice(len(flat), size=max(2, round(aux_fraction * len(flat))), replace=False))
    others = np.setdiff1d(np.arange(len(flat)), aux)
    # Targets standardised on the auxiliary rows too, so one penalty suits features of any scale.
    centre, spread = features[aux].mean(axis=0), features[aux].std(axis=0)
    spread = np.where(spread > 0, spread, 1.0)
    decoder = make_pipeline(StandardScaler(), RidgeCV(alphas=_DECODER_ALPHAS))
    decoder.fit(flat[aux], (features[aux] - centre) / spread)
    scale = features[others].std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    truth = features[others] / scale
    guess = (np.asarray(decoder.predict(flat[others])).reshape(truth.shape) * spread + centre) / scale
    baseline = np.broadcast_to(centre / scale, truth.shape)
    r2 = np.asarray(r2_score(truth, guess, multioutput="raw_values"), dtype=np.float64)
    return Inversion(
        mse=float(np.mean((guess - truth) ** 2)),
        r2=r2,
        mean_r2=float(r2.mean()),
        baseline_mse=float(np.mean((baseline - truth) ** 2)),
    )


__all__ = [
    "Completion",
    "Inversion",
    "RelativeNorm",
    "abs_direction_attack",
    "cluster_attack",
    "direction_attack",
    "epoch_average",
    "inversion",
    "known_rows",
    "label_attacks",
    "leak_auc",
    "minority",
    "model_completion",
    "norm_attack",
    "probe_attack",
    "relative_norm_attack",
    "roc_auc",
    "strongest_of",
]
