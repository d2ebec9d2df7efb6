"""ε of the embedding noise comes from opacus's accountant, under the assumptions ``vflprivacy.accounting`` states."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from opacus.accountants import RDPAccountant

from vflprivacy.accounting import REPORT_FILE, SENSITIVITY_IN_CLIPS, ReleaseLedger, embedding_epsilon


class TestEpsilon:
    def test_it_is_the_accountants_at_half_the_multiplier(self) -> None:
        """Replace-one moves a clipped row by 2C: the mechanism's multiplier is z / 2, sample rate 1."""
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
