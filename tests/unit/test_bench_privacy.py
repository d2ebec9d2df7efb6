"""The privacy bench's plan and verdict (``bench.privacy``, ``bench.privacy_report``), without running a job."""

from __future__ import annotations

import math

from bench.privacy import EVERY_ALGORITHM, SETTINGS, plan
from bench.privacy_report import verdict
from bench.privacy_runs import Outcome, Run


def _outcome(
    setting: str, utility: float, norm: float, direction: float, *, state: str = "finished", repeat: int = 0
) -> Outcome:
    run = Run("imbalanced", "splitnn", setting, SETTINGS[setting], repeat)
    return Outcome(run, state=state, utility=utility, attacks={"norm_auc": norm, "direction_auc_k1": direction})


class TestVerdict:
    def test_best_setting_within_the_utility_bound_is_judged(self) -> None:
        """The lowest max(norm, direction k=1) among settings within 0.01 of the undefended ROC AUC is the value;
        a lower one that costs more utility does not count."""
        lines = verdict(
            [
                _outcome("none", 0.900, 0.95, 1.00),
                _outcome("marvell-0.25", 0.895, 0.52, 0.58),
                _outcome("marvell-0.1", 0.850, 0.50, 0.51),
                _outcome("max_norm", 0.899, 0.70, 0.62),
            ]
        )
        assert "marvell-0.25" in lines[-2]
        assert lines[-1] == "BENCH privacy_attack_auc 0.580 auc target <= 0.60 MET"

    def test_missed_when_the_best_useful_setting_still_leaks(self) -> None:
        """A best useful setting above 0.60 is MISSED, with its value."""
        lines = verdict([_outcome("none", 0.900, 0.95, 1.00), _outcome("max_norm", 0.905, 0.61, 0.40)])
        assert lines[-1] == "BENCH privacy_attack_auc 0.610 auc target <= 0.60 MISSED"

    def test_no_useful_setting_prints_the_frontier_and_the_best_overall(self) -> None:
        """If every defence costs more than 0.01, the frontier is printed and the lowest AUC of all is MISSED."""
        lines = verdict(
            [
                _outcome("none", 0.900, 0.95, 1.00),
                _outcome("gaussian-2", 0.700, 0.55, 0.50),
                _outcome("gaussian-0.5", 0.850, 0.80, 0.70),
                _outcome("marvell-1", 0.0, math.nan, math.nan, state="failed"),
            ]
        )
        assert any(line.startswith("  gaussian-2") for line in lines)
        assert "gaussian-2" in lines[-2]
        assert lines[-1] == "BENCH privacy_attack_auc 0.550 auc target <= 0.60 MISSED"

    def test_repeats_count_by_their_mean(self) -> None:
        """A setting run three times is judged on its mean utility and mean attack AUC, its spread printed."""
        lines = verdict(
            [
                _outcome("none", 0.900, 0.95, 1.00),
                _outcome("marvell-0.1", 0.900, 0.50, 0.54, repeat=0),
                _outcome("marvell-0.1", 0.880, 0.50, 0.69, repeat=1),  # alone, outside the utility bound
                _outcome("marvell-0.1", 0.900, 0.50, 0.54, repeat=2),
            ]
        )
        assert any("marvell-0.1   3 of 3 runs" in line and "(0.880-0.900)" in line for line in lines)
        assert lines[-1] == "BENCH privacy_attack_auc 0.590 auc target <= 0.60 MET"

    def test_repeats_count_each_runs_larger_attack(self) -> None:
        """The mean is of each run's larger attack (0.60 and 0.60), not the larger of the two attacks' means (0.50)."""
        lines = verdict(
            [
                _outcome("none", 0.900, 0.95, 1.00),
                _outcome("max_norm", 0.900, 0.60, 0.40, repeat=0),
                _outcome("max_norm", 0.900, 0.40, 0.60, repeat=1),
            ]
        )
        assert lines[-1] == "BENCH privacy_attack_auc 0.600 auc target <= 0.60 MET"

    def test_without_runs_to_compare_it_is_missed(self) -> None:
        """No undefended run (or no defended one) gives nan and MISSED, not an exception."""
        assert verdict([])[-1] == "BENCH privacy_attack_auc nan auc target <= 0.60 MISSED"
        assert verdict([_outcome("none", 0.9, 0.9, 0.9)])[-1].endswith("MISSED")


class TestPlan:
    def test_tables_give_each_algorithm_its_undefended_run_first(self) -> None:
        """Swept pairs run every setting, others "none" and the defences for every algorithm; Marvell never on a
        multi-class task."""
        runs = plan(("imbalanced", "wine"), ("splitnn", "vimsgd"), None)
        swept = [r.setting for r in runs if (r.task, r.algorithm) == ("imbalanced", "splitnn")]
        assert swept == list(SETTINGS)
        vimsgd = [r.setting for r in runs if (r.task, r.algorithm) == ("imbalanced", "vimsgd")]
        assert vimsgd == ["none", *EVERY_ALGORITHM[True]]
        assert [r.setting for r in runs if r.task == "wine"] == ["none", *EVERY_ALGORITHM[False]] * 2
        assert all(r.privacy == SETTINGS[r.setting] for r in runs)

    def test_only_the_targets_defended_settings_repeat(self) -> None:
        """Repeats apply to the imbalanced SplitNN defended settings, each with its own job id; nothing else."""
        runs = plan(("imbalanced", "cancer"), ("splitnn",), None, repeats=3)
        target = [r for r in runs if r.task == "imbalanced"]
        assert len(target) == 1 + 3 * (len(SETTINGS) - 1)
        assert len({r.job_id for r in runs}) == len(runs)
        assert [r.label for r in target if r.setting == "max_norm"] == ["max_norm", "max_norm#2", "max_norm#3"]
        assert len([r for r in runs if r.task == "cancer"]) == len(SETTINGS)
