"""The README's main job, as `make demo` runs it: three OS processes over mTLS on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vfltesting.paths import REPO_ROOT as ROOT

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
#: The examples import ``vfltesting``, which is not installed: the repository root goes on the path.
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class TestDemoProcesses:
    def test_demo_reaches_the_accuracy_bar(self, tmp_path: Path) -> None:
        """vfl-certs, the data script and run_demo.py (daemons started once, two jobs) exit 0; SplitNN reaches
        >= 0.93 and the APFed-C endpoint answers alone."""
        certs, data, runs = tmp_path / "certs", tmp_path / "data", tmp_path / "runs"
        subprocess.run([str(BIN / "vfl-certs"), "init", "--out", str(certs), "--parties", "2", "3"], check=True)
        subprocess.run(
            [sys.executable, str(ROOT / "examples/make_digits_data.py"), "--out", str(data)], check=True, env=ENV
        )
        demo = subprocess.run(
            [sys.executable, str(ROOT / "examples/run_demo.py"), "--certs", str(certs), "--data", str(data)]
            + ["--run-dir", str(runs), "--timeout", "300"],
            capture_output=True,
            text=True,
            timeout=360,
            env=ENV,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "meets the 0.93 bar" in demo.stdout
        assert "digits-splitnn epoch 20/20" in demo.stdout  # watched live through JobClient
        assert "digits-apfed-c state finished" in demo.stdout
        jobs = runs / "runs"
        summary = json.loads((jobs / "digits-splitnn" / "party-1" / "summary.json").read_text())
        assert summary["final_metrics"]["accuracy"] >= 0.93
        for party in (2, 3):
            assert (jobs / "digits-splitnn" / f"party-{party}" / "latest.pt").exists()
        # The APFed-C model, served by the active party with both passive daemons stopped.
        assert "both passive daemons stopped (exit 0)" in demo.stdout
        assert "same predictions as the server's final inference: True" in demo.stdout
        assert (jobs / "digits-apfed-c" / "party-1" / "model.onnx").exists()
        assert (jobs / "model_repository" / "digits-apfed-c" / "1" / "model.onnx").exists()
        assert (jobs / "model_repository" / "digits-apfed-c" / "config.pbtxt").exists()
        for party in (2, 3):  # every party's trained part leaves as ONNX, on its own host
            assert (jobs / "digits-splitnn" / f"party-{party}" / "model.onnx").exists()
        assert (jobs / "jobs.sqlite").exists()  # the one job store
        assert (certs / "demo-app.pem").exists()
