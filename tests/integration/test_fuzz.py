"""A short fuzz campaign in the suite: at least 500 cases at every RPC while an honest job trains.

``make test`` runs ``FUZZ_CASES`` (default 500) cases; ``make fuzz`` runs more (``FUZZ_CASES`` in
the Makefile) and ``make bench-fuzz`` 10,000 with a printed report. See ``vfltesting.fuzz.campaign``
for the targets, the identities and what counts as a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vfltesting.datasets import write_digits_split
from vfltesting.fuzz.campaign import CALLER, epochs_for, failed, run_campaign
from vfltesting.pki import issue_pki

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

CASES = int(os.environ.get("FUZZ_CASES", "500"))


def test_no_crash_no_internal_error_and_the_honest_job_is_undisturbed(tmp_path: Path) -> None:
    pki = issue_pki(tmp_path / "pki", (2, 3, 4), callers=(CALLER,))
    data = tmp_path / "data"
    data.mkdir()
    write_digits_split(data, seed=0)
    report = run_campaign(tmp_path / "service", pki, data, cases=CASES, epochs=epochs_for(CASES), log=lambda _: None)
    assert report.total >= CASES, report.lines()
    assert failed(report) == [], "\n".join(report.lines() + failed(report))
    # Every target was reached, and the honest job was compared step by step.
    assert all(count > 0 for count in report.cases.values()) and len(report.cases) >= 28, report.lines()
    assert report.loss_difference <= 1e-6
