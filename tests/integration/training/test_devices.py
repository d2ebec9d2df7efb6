"""``[compute] device``: each daemon's own hardware choice, refused at start when the host lacks it.

The first tests run everywhere: on a host without a GPU (CI), a daemon asked for ``cuda`` exits 2 at
start with a message that says so, before it reads data or dials anyone. The ``cuda`` tests need a
GPU and are skipped without one (``tests/conftest.py``): a SplitNN job with the server on the GPU and
the clients on the CPU, and the reverse, compared with the same job all on the CPU. On a GPU the
per-step losses are close to the CPU run's but not equal (other kernels, other summation order),
so the comparison is printed and bounded loosely, not held to the CPU's 1e-5.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from vfltesting.forked import Launcher
from vfltesting.in_process import run_whole_job
from vfltesting.jobs import REFERENCE_JOB
from vfltesting.pki import Pki
from vfltesting.service import service_env, toml_text

pytestmark = [pytest.mark.integration]
BIN = Path(sys.executable).parent
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU: cuda is not missing here")


def _config(tmp_path: Path, pki: Pki, digits_data: Path, section: str, device: str) -> Path:
    """A complete vfl-server (``section`` "server") or vfl-client ("client") config asking for ``device``."""
    files = pki.server_files() if section == "server" else pki.party_files(2)
    document: dict[str, dict[str, object]] = {
        section: {"run_dir": str(tmp_path / "runs")} | ({"party": 2} if section == "client" else {}),
        "tls": {"ca": files.ca, "cert": files.cert, "key": files.key},
        "data": {"path": digits_data / ("party1.csv" if section == "server" else "party2.csv")},
        "compute": {"device": device},
    }
    path = tmp_path / f"{section}.toml"
    path.write_text(toml_text(document))
    return path


def _start(command: str, config: Path, launcher: Launcher | None = None) -> tuple[int, str]:
    """The command's exit code and stderr: exec'd, or forked from the suite's pre-imported launcher.

    The cuda refusal is checked once exec'd, as a user starts the command; the other cases are forked
    (``vfltesting.forked``: the same ``main`` in its own process, without the interpreter's start and
    imports), about 1 CPU-s a start rather than 5.5 (measured).
    """
    argv = [str(BIN / command), "--config", str(config)]
    if launcher is None:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        return done.returncode, done.stderr
    stderr = config.with_suffix(".stderr")
    daemon = launcher.start(argv, stderr=stderr, append=False, env=service_env(), cwd=config.parent)
    code = daemon.wait(timeout=120)
    return code, stderr.read_text()


@no_gpu
@pytest.mark.parametrize(
    ("command", "section", "forked"), [("vfl-client", "client", True), ("vfl-server", "server", False)]
)
def test_a_daemon_asked_for_cuda_without_a_gpu_exits_2(
    command: str, section: str, forked: bool, tmp_path: Path, pki: Pki, digits_data: Path, forked_daemons: Launcher
) -> None:
    """Refused at start, naming the key and the way out; not at the first training step."""
    code, stderr = _start(
        command, _config(tmp_path, pki, digits_data, section, "cuda"), forked_daemons if forked else None
    )
    assert code == 2, stderr
    assert "[compute] device = 'cuda'" in stderr and "no usable CUDA GPU" in stderr, stderr
    assert 'set device = "cpu"' in stderr


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:0"])
def test_a_device_that_is_not_one_exits_2(
    device: str, tmp_path: Path, pki: Pki, digits_data: Path, forked_daemons: Launcher
) -> None:
    """Forked, every case: the refusal is ``main``'s. The console script exec'd and exiting 2 on a refused
    device is the cuda test's (vfl-server); an exec'd vfl-client's own start is test_signals'. "gpu" exec'd
    was this file's second exec: test_devices.py 33.6 -> 22.2 CPU-s forked (user+sys, pytest -n 0, a loaded
    machine, measured 2026-11-29)."""
    code, stderr = _start("vfl-client", _config(tmp_path, pki, digits_data, "client", device), forked_daemons)
    assert code == 2 and f"[compute] device = {device!r}" in stderr, stderr


@pytest.mark.cuda
def test_a_gpu_index_the_host_lacks_exits_2(tmp_path: Path, pki: Pki, digits_data: Path) -> None:
    code, stderr = _start("vfl-client", _config(tmp_path, pki, digits_data, "client", "cuda:99"))
    assert code == 2 and "CUDA device(s)" in stderr, stderr


@pytest.mark.cuda
@pytest.mark.parametrize(("server", "clients"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_splitnn_with_a_gpu_party_and_cpu_parties_trains_like_the_cpu_run(
    server: str, clients: str, pki: Pki, digits_data: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    """Mixed devices train together: per-step losses near the all-CPU run's, accuracy within 2 points."""
    # 12 epochs, as when its 2-point margin was set: REFERENCE_JOB's 4 end short of convergence, where
    # other kernels' rounding may move the accuracy more. It runs only on a GPU host (no CPU cost in CI).
    job = replace(REFERENCE_JOB, job_id=f"devices-{server}-{clients}", epochs=12)
    on_cpu = run_whole_job(pki, digits_data, tmp_path / "cpu", replace(job, job_id="devices-cpu"))
    mixed = run_whole_job(pki, digits_data, tmp_path / "mixed", job, device=server, passive_device=clients)
    cpu_losses = np.array(on_cpu.active.algorithm.step_losses)
    gpu_losses = np.array(mixed.active.algorithm.step_losses)
    gaps = np.abs(cpu_losses - gpu_losses)
    cpu_accuracy = on_cpu.summary().final_metrics["accuracy"]
    mixed_accuracy = mixed.summary().final_metrics["accuracy"]
    print(
        f"devices server={server} clients={clients}: accuracy {mixed_accuracy:.4f} vs CPU {cpu_accuracy:.4f}; "
        f"per-step loss difference max {gaps.max():.3g}, mean {gaps.mean():.3g}, first step {gaps[0]:.3g}"
    )
    assert len(gpu_losses) == len(cpu_losses)
    assert gaps[0] < 1e-4  # the same initial weights and batch: only kernel rounding differs
    assert abs(mixed_accuracy - cpu_accuracy) <= 0.02
