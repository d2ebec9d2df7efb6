"""``make bench-privacy`` in its quick mode: real daemons over mTLS, the probes, the table and the verdict line.

The bench's figures are its own business; this test holds its shape: one row per planned run,
each finished with a utility and the label attacks' AUCs, the CSV and the plot written, and a
last line a script can parse.

It runs the bench's ``main`` (what ``python -m bench.privacy --quick`` runs) in this process, and
the bench's three daemons (vfl-server, two ``bench.privacy.party``) are forked from the suite's
launcher, as every ``ServiceRun``'s are here: each still a process of its own over mTLS, its
``main`` parsing its own arguments. Before (2026-11-29), a ``python -m bench.privacy`` subprocess
that exec'd the three: 40 CPU-s, of which about 7 importing the bench and about 20 the three
daemons' interpreter starts and imports.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

VERDICT = re.compile(r"BENCH privacy_worst_algorithm_attack_auc (\d\.\d{3}) auc target <= 0\.60 (MET|MISSED)")


class TestPrivacyBenchQuick:
    def test_quick_mode_prints_a_row_per_run_and_the_verdict_last(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two SplitNN runs on the imbalanced task (undefended, Marvell) finish and are probed; the last line is
        the verdict, with a value from those runs."""
        from bench.privacy.__main__ import main  # here: scikit-learn and the bench, not at every worker's collection

        code = main(["--quick", "--out", str(tmp_path)])
        done = capsys.readouterr()
        assert code == 0, done.out + done.err
        lines = done.out.strip().splitlines()
        rows = [line.split() for line in lines if line.startswith("imbalanced ")]
        assert [row[:4] for row in rows] == [
            ["imbalanced", "splitnn", "none", "0"],
            ["imbalanced", "splitnn", "marvell-0.25", "0"],
        ], done.out
        assert all(0.5 < float(row[4]) <= 1.0 for row in rows), done.out  # test ROC AUC: the model learned
        assert any(line.startswith("| imbalanced | splitnn | marvell-0.25 | 1 |") for line in lines), done.out
        last = VERDICT.fullmatch(lines[-1])
        assert last is not None, lines[-1]
        with (tmp_path / "privacy.csv").open(newline="") as handle:
            table = list(csv.DictReader(handle))
        assert [r["setting"] for r in table] == ["none", "marvell-0.25"]
        # the cell's label attack: the strongest attacker over the run, which bounds the last epoch's two
        attack = [max(float(r[key]) for key in ("strongest_auc_run", "norm_auc", "direction_auc_k1")) for r in table]
        assert all(math.isfinite(a) for a in attack), table
        assert lines[-2].startswith("worst algorithm: splitnn")
        # the best setting within the cost bound is one of the two runs: the value is its attack
        assert any(float(last.group(1)) == pytest.approx(a, abs=5e-4) for a in attack), (last.group(1), attack)
        assert (tmp_path / "privacy.png").stat().st_size > 0
