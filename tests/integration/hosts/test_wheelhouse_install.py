"""The offline install of the hosts' README: ``pip install --no-index --find-links wheelhouse vfl-service``.

``make wheelhouse`` fills the wheelhouse once, on a machine that reaches the package index: the
project's wheel, torch's CPU wheel and every other dependency (docs/tutorials/separate-hosts.md, "Installing
on a host"). Copying that (hundreds of MB) in every test run is too dear, so the wheelhouse here
holds the project's wheel only, built once per session as the separate-hosts harness builds it,
and the fresh venv sees the test environment's third-party packages (``vfltesting.hosts.install``).
What is checked is what the README's command relies on: the project found by name in a folder
with no index asked, its dependencies resolved, and the daemons' commands run from the venv.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vfltesting.hosts.faults import wheel_folder
from vfltesting.hosts.install import CLEAN_ENV, build_wheel, install_from_wheelhouse, installed_from

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_the_project_installs_by_name_from_a_wheelhouse_with_no_index(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``pip install --no-index --find-links WHEELHOUSE vfl-service`` installs the wheel and its commands."""
    wheelhouse = wheel_folder(tmp_path_factory.getbasetemp())
    build_wheel(wheelhouse)
    bin_dir = install_from_wheelhouse(tmp_path / "venv", wheelhouse)
    assert installed_from(bin_dir, []).is_relative_to(tmp_path / "venv"), "the project came from somewhere else"
    assert all((bin_dir / command).is_file() for command in ("vfl-server", "vfl-client", "vfl-jobs"))
    # one command run, the light one: vfl-server's --help imports torch (30 s on a busy 2-core machine)
    done = subprocess.run([str(bin_dir / "vfl-certs"), "--help"], capture_output=True, text=True, env=CLEAN_ENV)
    assert done.returncode == 0, done.stderr
