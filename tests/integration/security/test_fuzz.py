"""A short fuzz campaign in the suite: every surface, while honest jobs train beside it.

``make test`` runs ``FUZZ_CASES`` (default 400) cases; ``make fuzz`` runs more (``FUZZ_CASES`` in
the Makefile) and ``make bench-fuzz`` 100,000 with a printed report. See ``vfltesting.fuzz`` for
the targets, the identities and what counts as a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vfltesting.datasets import write_digits_split
from vfltesting.fuzz.campaign import run_campaign
from vfltesting.fuzz.live import CALLER
from vfltesting.fuzz.report import failed
from vfltesting.pki import issue_pki

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

#: 400, not 600: the honest jobs train the whole time the cases are sent, so the campaign's CPU goes
#: with its length. At 600 and at 400 cases (about 17 and 11 a target) the same 56 (target, status)
#: pairs came back, except the ABORTED and "held open" answers, which depend on where the honest
#: job is when a case lands; at 300, "Control.Submit as operator: OK" (an accepted random job)
#: and "ModelInfer as caller: OK" no longer came (2026-11-29). ``make fuzz`` runs 3000.
CASES = int(os.environ.get("FUZZ_CASES", "400"))
#: Every surface the campaign reaches (docs/explanation/fuzzing.md).
SURFACES = {"federation", "psi", "control", "job tables", "files", "inference", "rest", "console", "ids"}
SURFACES |= {"party config"}


def test_no_crash_no_internal_error_and_the_honest_jobs_are_undisturbed(tmp_path: Path) -> None:
    pki = issue_pki(tmp_path / "pki", (2, 3, 4), callers=(CALLER,))
    data = tmp_path / "data"
    data.mkdir()
    write_digits_split(data, seed=0)
    # Jobs of 1 epoch: the reference job and the last honest job's end are waited for outside the cases,
    # and an honest copy is compared step by step with the reference whatever its length (at 3 epochs
    # the test took 8 % longer than at 2, side by side on the 2-core machine; 1 epoch and 400 cases
    # rather than 2 and 600: about 49 -> 31-37 CPU-s for the campaign, 2026-11-29).
    report = run_campaign(tmp_path / "service", pki, data, cases=CASES, epochs=1, log=lambda _: None)
    assert report.total >= CASES, report.lines()
    assert failed(report) == [], "\n".join(report.lines() + failed(report))
    # Every target and surface was reached, and each honest job was compared step by step.
    assert all(count > 0 for count in report.cases.values()) and len(report.cases) >= 40, report.lines()
    assert set(report.per_surface()) == SURFACES, report.lines()
    assert report.honest_jobs >= 1 and report.loss_difference <= 1e-6 and report.weight_difference <= 1e-6
    assert report.predictions_unchanged is True
