"""ε of the embedding noise comes from opacus's accountant, under the assumptions ``vflprivacy.accounting`` states."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from vflprivacy.accounting import (
    REPORT_FILE,
    SENSITIVITY_IN_CLIPS,
    ReleaseLedger,
    embedding_epsilon,
    repeated_signal_epsilon,
)


class TestEpsilon:
    def test_it_is_the_accountants_at_half_the_multiplier(self) -> None:
        """Replace-one moves a clipped row by 2C: the mechanism's multiplier is z / 2, sample rate 1."""
        from opacus.accountants import RDPAccountant  # here, as in the module: 2 CPU-s to import, per test process

        accountant = RDPAccountant()
        for _ in range(7):
            accountant.step(noise_multiplier=1.2 / SENSITIVITY_IN_CLIPS, sample_rate=1.0)
        assert embedding_epsilon(1.2, 7, 1e-5) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)

    def test_it_falls_as_the_noise_multiplier_grows(self) -> None:
        values = [embedding_epsilon(z, 10, 1e-5) for z in (0.5, 1.0, 2.0, 4.0, 8.0)]
        assert all(a > b for a, b in itertools.pairwise(values)), values

    def test_it_grows_with_the_number_of_releases(self) -> None:
        values = [embedding_epsilon(2.0, n, 1e-5) for n in (1, 5, 20, 100)]
        assert all(a < b for a, b in itertools.pairwise(values)), values

    def test_it_grows_as_delta_shrinks(self) -> None:
        assert embedding_epsilon(2.0, 10, 1e-7) > embedding_epsilon(2.0, 10, 1e-3)

    def test_nothing_sent_costs_nothing_and_clipping_alone_is_no_guarantee(self) -> None:
        assert embedding_epsilon(1.0, 0, 1e-5) == 0.0
        assert math.isinf(embedding_epsilon(0.0, 3, 1e-5))

    def test_a_delta_outside_0_1_is_refused(self) -> None:
        with pytest.raises(ValueError, match="delta"):
            embedding_epsilon(1.0, 3, 1.0)


class TestPersistentNoise:
    """``noise_persistence`` ρ: a share of each row's noise the same in every release (``RowNormals``)."""

    def test_the_worst_case_is_the_fresh_share_alone(self) -> None:
        """A contribution that alternates in sign sees only √(1−ρ) of the noise: ε at multiplier z·√(1−ρ)."""
        assert embedding_epsilon(2.0, 10, 1e-5, 0.75) == pytest.approx(embedding_epsilon(1.0, 10, 1e-5), rel=1e-12)
        assert embedding_epsilon(2.0, 10, 1e-5, 0.75) > embedding_epsilon(2.0, 10, 1e-5)

    def test_the_mahalanobis_norms_behind_both_figures(self) -> None:
        """Covariance (1−ρ)I + ρ11ᵀ over T = 10 releases: an alternating difference costs T/(1−ρ), a repeated one
        T/(1−ρ+ρT); with ρ = 0 both are T, the fresh composition."""
        releases, rho = 10, 0.75
        covariance = (1 - rho) * np.eye(releases) + rho * np.ones((releases, releases))
        alternating, repeated = np.resize([1.0, -1.0], releases), np.ones(releases)
        inverse = np.linalg.inv(covariance)
        assert alternating @ inverse @ alternating == pytest.approx(releases / (1 - rho))
        assert repeated @ inverse @ repeated == pytest.approx(releases / (1 - rho + rho * releases))

    def test_a_repeated_contribution_costs_at_most_1_over_rho_releases_however_long_the_job(self) -> None:
        """ρ = 0.5: 10, 100 and 10,000 releases all cost less than 2 releases' worth, where fresh noise grows on."""
        for releases in (10, 100, 10_000):
            assert repeated_signal_epsilon(2.0, releases, 1e-5, 0.5) < embedding_epsilon(2.0, 2, 1e-5)
        assert embedding_epsilon(2.0, 100, 1e-5) > 4 * embedding_epsilon(2.0, 2, 1e-5)
        assert repeated_signal_epsilon(2.0, 7, 1e-5, 0.0) == pytest.approx(embedding_epsilon(2.0, 7, 1e-5), rel=1e-9)

    def test_the_report_carries_both(self, tmp_path: Path) -> None:
        ledger = ReleaseLedger(tmp_path)
        for round_ in range(30):
            ledger.record("apfed/active_embedding", round_)
        report = ledger.report(noise_multiplier=2.0, clip=1.0, delta=1e-5, persistence=0.5)
        assert report.epsilon == pytest.approx(embedding_epsilon(2.0, 30, 1e-5, 0.5))
        assert report.epsilon_repeated == pytest.approx(repeated_signal_epsilon(2.0, 30, 1e-5, 0.5))
        saved = json.loads((tmp_path / REPORT_FILE).read_text())
        assert saved["persistence"] == 0.5 and saved["epsilon_repeated"] == pytest.approx(report.epsilon_repeated)


def test_the_report_writes_epsilon_next_to_the_releases(tmp_path: Path) -> None:
    ledger = ReleaseLedger(tmp_path)
    for round_ in range(4):
        ledger.record("embedding", round_)
    ledger.record("eval/embedding", 3)
    report = ledger.report(noise_multiplier=2.0, clip=1.0, delta=1e-5)
    assert report.releases == 5
    assert report.epsilon == pytest.approx(embedding_epsilon(2.0, 5, 1e-5))
    saved = json.loads((tmp_path / REPORT_FILE).read_text())
    assert saved["epsilon"] == pytest.approx(report.epsilon) and saved["delta"] == 1e-5
    assert len(saved["ledger"]) == 5
    no_noise = ReleaseLedger(tmp_path).report(noise_multiplier=0.0, clip=1.0, delta=1e-5)
    assert math.isinf(no_noise.epsilon) and json.loads((tmp_path / REPORT_FILE).read_text())["epsilon"] is None
