"""The README's main job, as `make demo` runs it: three OS processes over mTLS on 127.0.0.1.

``run_demo.py``'s ``main`` runs in the test process, so its three daemons are forked from the
suite's launcher (``vfltesting.forked``) instead of exec'd: still three OS processes, each its
console script's ``main``, started, watched and stopped by SIGTERM as ``make demo`` does. That
saves the three daemons' and the script's interpreter starts and imports, about 20 of the test's
50 CPU-s (2026-11-29). ``make demo`` itself, exec'd daemons and all, runs in CI after ``make test``.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from vfltesting.paths import REPO_ROOT as ROOT

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


class TestDemoProcesses:
    def test_demo_reaches_the_accuracy_bar(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """vfl-certs, the data script and run_demo.py (daemons started once, two jobs) end with 0; SplitNN reaches
        >= 0.93 and the APFed-C endpoint answers alone."""
        certs, data, runs = tmp_path / "certs", tmp_path / "data", tmp_path / "runs"
        subprocess.run([str(BIN / "vfl-certs"), "init", "--out", str(certs), "--parties", "2", "3"], check=True)
        runpy.run_path(str(ROOT / "examples/make_digits_data.py"))["main"](["--out", str(data)])
        run_demo = runpy.run_path(str(ROOT / "examples/run_demo.py"))["main"]
        code = run_demo(["--certs", str(certs), "--data", str(data), "--run-dir", str(runs), "--timeout", "300"])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        assert "meets the 0.93 bar" in out
        assert "digits-splitnn epoch 20/20" in out  # watched live through JobClient
        assert "digits-apfed-c state finished" in out
        jobs = runs / "runs"
        summary = json.loads((jobs / "digits-splitnn" / "party-1" / "summary.json").read_text())
        assert summary["final_metrics"]["accuracy"] >= 0.93
        for party in (2, 3):
            assert (jobs / "digits-splitnn" / f"party-{party}" / "latest.pt").exists()
        # The APFed-C model, served by the active party with both passive daemons stopped.
        assert "both passive daemons stopped (exit 0)" in out
        assert "same predictions as the server's final inference: True" in out
        assert (jobs / "digits-apfed-c" / "party-1" / "model.onnx").exists()
        assert (jobs / "model_repository" / "digits-apfed-c" / "1" / "model.onnx").exists()
        assert (jobs / "model_repository" / "digits-apfed-c" / "config.pbtxt").exists()
        for party in (2, 3):  # every party's trained part leaves as ONNX, on its own host
            assert (jobs / "digits-splitnn" / f"party-{party}" / "model.onnx").exists()
        assert (jobs / "jobs.sqlite").exists()  # the one job store
        assert (certs / "demo-app.pem").exists()
