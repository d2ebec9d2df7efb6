"""(ε, δ) of a passive party's embedding noise, from opacus's maintained RDP accountant, and the releases it counts.

Privacy accounting is easy to get subtly wrong, so the arithmetic is opacus's
(``opacus.accountants.RDPAccountant``); this module only says what is composed, under these
assumptions, which ``docs/explanation/privacy.md`` repeats:

- **Neighbouring datasets** differ in the features of one row (replace one row). Every embedding
  row is clipped to L2 norm C before it leaves (``vflprivacy.embedding_noise``), so one row's
  replacement moves what is sent by at most 2·C. Gaussian noise of standard deviation z·C is then
  the Gaussian mechanism with noise multiplier z / 2 relative to that sensitivity.
- **No amplification by subsampling** (sample_rate = 1): the active party chooses the batches and
  knows which rows each holds, so a row's presence in a batch is no secret.
- **Composition**: a row's embedding leaves once per *release*: a round's upload of the tensors of
  one name (an epoch's embeddings, APFed's gradients, async's warm-up upload), an evaluation, an
  inference request. Each row is in at most one batch of a round, so the number of releases bounds
  how often any one row left; evaluation rows are counted as if they were every row (an upper bound).
  A release sent again after a resume, at the same position, carries the same noise on the same
  embedding (``vflprivacy.noise``), so it is the same value and is counted once.

- **Noise that persists** (``[privacy] noise_persistence`` ρ, the active party's h^A): each
  release's noise is √(1−ρ)·fresh + √ρ·z_row, z_row the same in every release of the row. The T
  releases are then one Gaussian mechanism of covariance σ²((1−ρ)I + ρ11ᵀ). Its worst case is a
  row whose contribution alternates in sign between releases: only the fresh share hides that, so
  ε is that of T releases at noise multiplier z·√(1−ρ) (``embedding_epsilon``; tight for even T).
  What persistence buys is the other case, a contribution that every release repeats (a row's
  label signature, which averaging over epochs recovers): its Mahalanobis sensitivity is
  T/(1−ρ+ρT) releases' worth, never more than 1/ρ whatever T (``repeated_signal_epsilon``).

What this does not cover: the model's weights (they never leave a passive party), VIMADMM-J's head
W_k sent once for the client-importance report (a trained weight matrix, not a per-row release),
and what the *labels* leak (the active party's own defences).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from vflcore.data.checkpoints import atomic_write

#: One row replaced moves its clipped embedding by at most twice the clipping norm.
SENSITIVITY_IN_CLIPS = 2.0
#: The party's privacy report in its job folder: the releases so far and, at the job's end, ε.
REPORT_FILE = "privacy.json"


def embedding_epsilon(noise_multiplier: float, releases: int, delta: float, persistence: float = 0.0) -> float:
    """ε at ``delta`` after ``releases`` Gaussian releases of std ``noise_multiplier`` × C (clip C) per row.

    With ``persistence`` ρ, the worst case: only the fresh share, multiplier × √(1−ρ), hides a
    contribution that changes sign between releases. 0 releases: 0. No noise (``noise_multiplier``
    0) with a release: ∞, clipping alone is no DP.
    """
    return _gaussian_epsilon(noise_multiplier * math.sqrt(1 - persistence), releases, delta)


def repeated_signal_epsilon(noise_multiplier: float, releases: int, delta: float, persistence: float) -> float:
    """ε at ``delta`` for a contribution that is the same in every one of ``releases`` (what averaging recovers).

    The T releases' noise has covariance σ²((1−ρ)I + ρ11ᵀ); a repeated difference has Mahalanobis
    norm² T / (1−ρ+ρT) in units of one release's: one Gaussian release at multiplier × √((1−ρ+ρT)/T).
    With ρ = 0 that is ``embedding_epsilon``'s T releases exactly; with ρ > 0 it stays below 1/ρ
    releases' worth however many epochs run.
    """
    if releases <= 0:
        return _gaussian_epsilon(noise_multiplier, 0, delta)
    scale = math.sqrt((1 - persistence + persistence * releases) / releases)
    return _gaussian_epsilon(noise_multiplier * scale, 1, delta)


def _gaussian_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """opacus's RDP accountant over ``releases`` unsubsampled Gaussian releases (sensitivity two clips)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta = {delta} must be in (0, 1)")
    if releases <= 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    from opacus.accountants import RDPAccountant  # imported here: opacus takes seconds to import

    accountant = RDPAccountant()
    for _ in range(releases):
        accountant.step(noise_multiplier=noise_multiplier / SENSITIVITY_IN_CLIPS, sample_rate=1.0)
    return float(accountant.get_epsilon(delta))


@dataclass(frozen=True)
class EmbeddingPrivacy:
    """What a party reports when a job ends: the guarantee of what its embeddings revealed."""

    epsilon: float
    delta: float
    releases: int
    noise_multiplier: float
    clip: float
    accountant: str = "opacus.accountants.RDPAccountant (replace-one, sample_rate = 1)"
    #: ``noise_persistence``, and ε for a contribution every release repeats (``repeated_signal_epsilon``).
    persistence: float = 0.0
    epsilon_repeated: float = math.nan

    def as_json(self) -> dict[str, object]:
        """The report as JSON can hold it: an unbounded ε (no noise) is null."""
        summary = asdict(self)
        for key in ("epsilon", "epsilon_repeated"):
            summary[key] = None if math.isinf(summary[key]) or math.isnan(summary[key]) else summary[key]
        return summary


class ReleaseLedger:
    """The releases this party has made in one job, kept in ``privacy.json`` so a restarted party counts on.

    A release is (tensor name, round); saved as it is first seen, so a party killed mid-job and
    resumed still counts every release its earlier process made.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / REPORT_FILE
        self._releases: set[tuple[str, int]] = set()
        if self.path.exists():
            saved = json.loads(self.path.read_text())
            self._releases = {(str(name), int(round_)) for name, round_ in saved.get("ledger", [])}

    def __len__(self) -> int:
        return len(self._releases)

    def record(self, name: str, round_: int) -> None:
        """Count a release of tensors named ``name`` in ``round_``, once however often it is sent."""
        if (name, round_) in self._releases:
            return
        self._releases.add((name, round_))
        self._write({})

    def report(self, noise_multiplier: float, clip: float, delta: float, persistence: float = 0.0) -> EmbeddingPrivacy:
        """ε for the releases so far, from the accountant; written to ``privacy.json`` beside them."""
        epsilon = embedding_epsilon(noise_multiplier, len(self), delta, persistence)
        repeated = repeated_signal_epsilon(noise_multiplier, len(self), delta, persistence)
        report = EmbeddingPrivacy(
            epsilon, delta, len(self), noise_multiplier, clip, persistence=persistence, epsilon_repeated=repeated
        )
        self._write(report.as_json())
        return report

    def _write(self, summary: dict[str, object]) -> None:
        body = {**summary, "ledger": sorted([name, round_] for name, round_ in self._releases)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(json.dumps(body, indent=2).encode(), self.path)


__all__ = [
    "REPORT_FILE",
    "SENSITIVITY_IN_CLIPS",
    "EmbeddingPrivacy",
    "ReleaseLedger",
    "embedding_epsilon",
    "repeated_signal_epsilon",
]
