"""The SecretFlow comparison's own arithmetic: the runner's JSON read back, the table and the last line.

The comparison itself needs spu's venv and minutes of PSI; these check, in milliseconds, that what
the runner prints is read and checked as its docstring says, and that the BENCH line is right.
"""

from __future__ import annotations

import json
import math

import pytest

from bench.psi.report import secretflow_bench_line
from bench.psi.secretflow_comparison import (
    REFERENCE,
    OurFigures,
    SecretFlowResults,
    default_protocols,
    parse_runner_output,
    side_by_side,
)


def runner_line(protocol: str = "ecdh-25519", intersection: int = 500, rows: int = 500) -> str:
    """A line as ``secretflow.py run`` prints it."""
    parties = [
        {
            "rank": rank,
            "process_wall_s": 9.5 + rank,
            "psi_s": 8.0,
            "cpu_s": 12.3 + rank,
            "maxrss_kib": 300 * 1024 + rank,
            "original": 1000,
            "intersection": intersection,
            "output_rows": rows,
        }
        for rank in (0, 1)
    ]
    return json.dumps({"protocol": protocol, "version": "0.9.5", "wall_s": 8.5, "parties": parties})


class TestParseRunnerOutput:
    def test_last_json_line_read_as_figures(self) -> None:
        run = parse_runner_output(f"spu says hello\n{runner_line('rr22')}\n", expected=500)
        assert (run.protocol, run.version, run.wall_s) == ("rr22", "0.9.5", 8.5)
        p0, p1 = run.parties
        assert (p0.rank, p0.cpu_s, p0.maxrss_kib, p0.intersection) == (0, 12.3, 300 * 1024, 500)
        assert (p1.rank, p1.process_wall_s, p1.psi_s, p1.output_rows) == (1, 10.5, 8.0, 500)

    @pytest.mark.parametrize(("intersection", "rows"), [(499, 500), (500, 501)])
    def test_wrong_intersection_or_rows_refused(self, intersection: int, rows: int) -> None:
        with pytest.raises(RuntimeError, match="expected 500"):
            parse_runner_output(runner_line(intersection=intersection, rows=rows), expected=500)

    def test_no_result_refused(self) -> None:
        with pytest.raises(RuntimeError, match="no result"):
            parse_runner_output("Traceback ...\n", expected=500)


class TestBenchLine:
    def test_met_when_ours_is_not_slower(self) -> None:
        assert (
            secretflow_bench_line(1_000_000, 20.0, 25.0) == "BENCH psi_1m_vs_secretflow_ecdh 0.80 x target <= 1.0 MET"
        )
        assert secretflow_bench_line(1_000_000, 25.0, 25.0).endswith(" 1.00 x target <= 1.0 MET")

    def test_missed_when_slower(self) -> None:
        assert secretflow_bench_line(1_000_000, 30.0, 25.0) == (
            "BENCH psi_1m_vs_secretflow_ecdh 1.20 x target <= 1.0 MISSED"
        )

    def test_nan_and_missed_without_secretflow(self) -> None:
        assert secretflow_bench_line(1_000_000, 30.0, None) == (
            "BENCH psi_1m_vs_secretflow_ecdh nan x target <= 1.0 MISSED"
        )

    def test_other_sizes_named_by_their_ids(self) -> None:
        assert secretflow_bench_line(20_000, 1.0, 2.0).startswith("BENCH psi_20000_ids_vs_secretflow_ecdh 0.50 x")


def test_default_protocols_drop_elligator2_above_1m() -> None:
    assert default_protocols(1_000_000) == [REFERENCE, "ecdh-25519-elligator2", "ecdh-fourq", "rr22"]
    assert default_protocols(2_000_000) == [REFERENCE, "ecdh-fourq", "rr22"]


class TestSideBySide:
    ours = OurFigures(psi_s=17.0, cpu_s=(30.0, 31.5), rss_kib=(400 * 1024, 450 * 1024))

    def test_a_row_per_run_and_per_failure(self) -> None:
        run = parse_runner_output(runner_line(), expected=500)
        results = SecretFlowResults({REFERENCE: run}, {"kkrt": "rank 1 exited with 1\ntrace"})
        lines = side_by_side(1000, self.ours, results)
        ours = next(line for line in lines if line.lstrip().startswith("ours (ECDH"))
        assert ours.split()[3:] == ["17.0", "1.00", "30.0", "31.5", "400", "MiB", "450", "MiB"]
        theirs = next(line for line in lines if "SecretFlow ecdh-25519" in line)
        assert theirs.split()[2:] == ["8.5", "2.00", "12.3", "13.3", "300", "MiB", "300", "MiB"]
        assert any(line.strip() == "SecretFlow kkrt: failed (rank 1 exited with 1)" for line in lines)
        assert results.reference_s == 8.5

    def test_why_there_is_no_reference(self) -> None:
        failed = SecretFlowResults({}, {REFERENCE: "timed out"})
        assert failed.reference_s is None and failed.why_no_reference == f"SecretFlow {REFERENCE} failed: timed out"
        assert "not among" in SecretFlowResults({}, {}).why_no_reference
        skipped = SecretFlowResults({}, {}, "SecretFlow skipped (--secretflow skip)")
        assert skipped.why_no_reference == "SecretFlow skipped (--secretflow skip)"
        assert any("skipped" in line for line in side_by_side(1000, self.ours, skipped))
        assert math.isnan(float(secretflow_bench_line(1000, 1.0, skipped.reference_s).split()[2]))
