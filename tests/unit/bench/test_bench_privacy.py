"""The privacy bench's plan, cells and verdict (``bench.privacy``: ``plan``, ``cells``, ``report``).

Nothing here runs a job: the outcomes are made by hand, so the arithmetic of the means, the
intervals, the paired costs and the per-algorithm verdict can be checked exactly.
"""

from __future__ import annotations

import math

import pytest

from bench.privacy.cells import Estimate, cells
from bench.privacy.plan import ALGORITHMS, SETTINGS, SETTINGS_OF, plan
from bench.privacy.report import verdict
from bench.privacy.runs import Outcome, Run


def _outcome(
    setting: str,
    utility: float,
    norm: float,
    direction: float,
    *,
    seed: int = 0,
    algorithm: str = "splitnn",
    state: str = "finished",
    task: str = "imbalanced",
    **more: float,
) -> Outcome:
    run = Run(task, algorithm, setting, SETTINGS[setting], seed)
    attacks = {"norm_auc": norm, "direction_auc_k1": direction, **more}
    return Outcome(run, state=state, utility=utility, attacks=attacks)


class TestEstimate:
    def test_mean_and_a_student_t_interval(self) -> None:
        """Five values: the mean, and mean ± t(0.975, 4) · s / √5."""
        found = Estimate.of([0.50, 0.52, 0.54, 0.56, 0.58])
        half = 2.7764451 * math.sqrt(0.001) / math.sqrt(5)  # s² = 0.001
        assert found.mean == pytest.approx(0.54)
        assert (found.low, found.high) == (pytest.approx(0.54 - half), pytest.approx(0.54 + half))
        assert found.text() == f"0.540 [{0.54 - half:.3f}, {0.54 + half:.3f}]"

    def test_nan_values_are_left_out_and_one_value_has_no_interval(self) -> None:
        one = Estimate.of([0.7, math.nan])
        assert one.n == 1 and one.text() == "0.700"
        assert Estimate.of([]).text() == "-"


class TestCells:
    def test_the_cost_is_paired_by_seed(self) -> None:
        """Seed 0 lost 0.02 and seed 1 gained 0.00 against their own undefended runs: mean cost -0.01."""
        found = cells(
            [
                _outcome("none", 0.90, 0.9, 1.0, seed=0),
                _outcome("none", 0.80, 0.9, 1.0, seed=1),
                _outcome("max_norm", 0.88, 0.6, 0.6, seed=0),
                _outcome("max_norm", 0.80, 0.6, 0.6, seed=1),
            ]
        )
        assert [c.setting for c in found] == ["none", "max_norm"]
        assert found[1].cost.mean == pytest.approx(-0.01) and found[1].seeds == 2
        assert found[1].utility.mean == pytest.approx(0.84)  # unpaired, the seeds' spread would swamp the cost

    def test_the_label_attack_is_the_largest_mean_and_counts_admms_residual(self) -> None:
        """max(mean norm, mean direction); for ADMM the residual's attacks count too."""
        plain = cells([_outcome("none", 0.9, 0.60, 0.40, seed=0), _outcome("none", 0.9, 0.40, 0.60, seed=1)])
        assert plain[0].label_attack == pytest.approx(0.50)
        admm = cells([_outcome("none", 0.9, 0.5, 0.5, algorithm="vimadmm", residual_direction_auc_k1=0.8)])
        assert admm[0].label_attack == pytest.approx(0.8)

    def test_the_strongest_attacker_counts_where_it_was_probed(self) -> None:
        """The rows averaged over epochs read 0.84 where the last epoch's norm and direction read 0.5: 0.84 counts."""
        found = cells([_outcome("marvell-0.05", 0.9, 0.5, 0.5, strongest_auc_run=0.84)])
        assert found[0].label_attack == pytest.approx(0.84)
        admm = cells([_outcome("none", 0.9, 0.5, 0.5, algorithm="vimadmm", residual_strongest_auc_run=0.9)])
        assert admm[0].label_attack == pytest.approx(0.9)

    def test_a_cell_with_no_finished_run_says_why(self) -> None:
        refused = _outcome("marvell-0.25", math.nan, math.nan, math.nan, state="refused")
        refused.message = "[privacy] label_defence = 'marvell': apfed_c sends ..."
        [cell] = cells([refused])
        assert not cell.finished and cell.why_not.startswith("refused: [privacy] label_defence")


class TestVerdict:
    def test_each_algorithm_is_judged_and_the_worst_is_the_value(self) -> None:
        """SplitNN's best useful setting reaches 0.55, VIMSGD's only 0.62: the value is 0.62, MISSED, named."""
        lines = verdict(
            cells(
                [
                    _outcome("none", 0.90, 0.95, 1.00),
                    _outcome("marvell-0.25", 0.895, 0.52, 0.55),
                    _outcome("marvell-0.05", 0.850, 0.50, 0.51),  # lower, but costs 0.05: does not count
                    _outcome("none", 0.90, 0.95, 1.00, algorithm="vimsgd"),
                    _outcome("max_norm", 0.90, 0.62, 0.58, algorithm="vimsgd"),
                ]
            )
        )
        assert any("splitnn    meets: marvell-0.25" in line for line in lines)
        assert any("vimsgd     misses: max_norm" in line for line in lines)
        assert lines[-2] == "worst algorithm: vimsgd (0.620)"
        assert lines[-1] == "BENCH privacy_worst_algorithm_attack_auc 0.620 auc target <= 0.60 MISSED"

    def test_met_when_every_algorithm_meets_it(self) -> None:
        lines = verdict(cells([_outcome("none", 0.9, 0.95, 1.0), _outcome("max_norm", 0.905, 0.58, 0.40)]))
        assert lines[-1] == "BENCH privacy_worst_algorithm_attack_auc 0.580 auc target <= 0.60 MET"

    def test_a_setting_is_judged_on_its_mean_over_seeds(self) -> None:
        """One seed alone would fail the cost bound (−0.015); the mean over both (−0.0075) does not."""
        lines = verdict(
            cells(
                [
                    _outcome("none", 0.90, 0.9, 1.0, seed=0),
                    _outcome("none", 0.90, 0.9, 1.0, seed=1),
                    _outcome("marvell-0.1", 0.885, 0.50, 0.54, seed=0),
                    _outcome("marvell-0.1", 0.90, 0.50, 0.56, seed=1),
                ]
            )
        )
        assert lines[-1] == "BENCH privacy_worst_algorithm_attack_auc 0.550 auc target <= 0.60 MET"

    def test_the_undefended_setting_counts_when_nothing_else_is_affordable(self) -> None:
        """Every defence costs more than 0.01: the best affordable setting is no defence, and its frontier is shown."""
        lines = verdict(cells([_outcome("none", 0.9, 0.95, 1.0), _outcome("max_norm", 0.7, 0.5, 0.5)]))
        assert any("frontier: max_norm" in line for line in lines)
        assert lines[-1] == "BENCH privacy_worst_algorithm_attack_auc 1.000 auc target <= 0.60 MISSED"

    def test_a_setting_is_judged_by_its_worst_task(self) -> None:
        """marvell-0.25 is cheap on the imbalanced task but costs 0.03 on cancer: not affordable. max_norm reads
        0.52 and 0.58 on the two tasks: its attack is 0.58, the value."""
        runs = []
        for task in ("imbalanced", "cancer"):
            runs += [_outcome("none", 0.90, 0.95, 1.0, task=task)]
        runs += [
            _outcome("marvell-0.25", 0.899, 0.50, 0.50, task="imbalanced"),
            _outcome("marvell-0.25", 0.87, 0.50, 0.50, task="cancer"),
            _outcome("max_norm", 0.895, 0.52, 0.50, task="imbalanced"),
            _outcome("max_norm", 0.899, 0.50, 0.58, task="cancer"),
        ]
        lines = verdict(cells(runs))
        assert "over imbalanced, cancer" in lines[0]
        assert any("splitnn    meets: max_norm, attack 0.580" in line for line in lines)
        assert any("frontier: marvell-0.25      attack 0.500, worst cost -0.030" in line for line in lines)
        assert lines[-1] == "BENCH privacy_worst_algorithm_attack_auc 0.580 auc target <= 0.60 MET"

    def test_without_runs_it_is_missed(self) -> None:
        assert verdict([])[-1] == "BENCH privacy_worst_algorithm_attack_auc nan auc target <= 0.60 MISSED"


class TestPlan:
    def test_every_algorithm_runs_its_own_settings_for_every_seed(self) -> None:
        """Label defences where something is sent down, h^A's noise for APFed; the undefended cell first."""
        runs = plan(("imbalanced",), ALGORITHMS, None, seeds=5)
        for algorithm in ALGORITHMS:
            mine = [r for r in runs if r.algorithm == algorithm]
            assert list(dict.fromkeys(r.setting for r in mine)) == list(SETTINGS_OF[algorithm])
            assert [r.seed for r in mine if r.setting == "none"] == [0, 1, 2, 3, 4]
        assert len({r.job_id for r in runs}) == len(runs) == 5 * sum(len(SETTINGS_OF[a]) for a in ALGORITHMS)
        assert all(r.privacy == SETTINGS[r.setting] for r in runs)

    def test_multi_class_tasks_take_gaussian_noise_where_marvell_would_be(self) -> None:
        settings = {r.setting for r in plan(("wine",), ("splitnn",), None, seeds=1)}
        assert settings == {"none", "max_norm", "gaussian-0.5", "gaussian-2"}

    def test_chosen_settings_run_exactly(self) -> None:
        runs = plan(("imbalanced",), ("splitnn",), ("none", "marvell-0.25"), seeds=2)
        assert [(r.setting, r.seed) for r in runs] == [
            ("none", 0),
            ("none", 1),
            ("marvell-0.25", 0),
            ("marvell-0.25", 1),
        ]
