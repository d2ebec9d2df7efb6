"""The per-host install of ``docs/tutorials/separate-hosts.md``: a wheel of the project, and a fresh venv on each host.

``build_wheel`` runs ``pip wheel --no-deps`` once for a test session, from a copy of the
project's sources (a build in the checkout would leave ``build/`` in it), under a file lock so
that pytest-xdist's workers share one wheel. ``install_host`` makes a venv and installs the wheel
into it with ``--no-deps``, as an operator installs it on each host.

What is not as on a real host, and why: the wheel's dependencies (torch, grpc, numpy, ...) are
not installed again in every venv, which would take minutes and a download per host. A
``.pth`` file in the venv appends the test environment's ``site-packages`` to its path instead.
It is appended, after the venv's own ``site-packages``, and as a plain path its own ``.pth``
files are not run, so the project's code comes from the wheel and only the third-party packages
are shared; ``installed_from`` checks that.

``install_from_wheelhouse`` is the hosts' README's offline install instead: ``pip install
--no-index --find-links WHEELHOUSE vfl-service``, by name, with the dependencies resolved. Its
shared packages are the test environment's less the project's own editable install, which pip
would otherwise take for the project already installed.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

#: What ``pyproject.toml`` packages, and the files the build reads.
ROOT = Path(__file__).resolve().parents[2]
#: A host's environment: no PYTHONPATH, so a host's Python imports only what its venv holds.
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
SOURCES = ("pyproject.toml", "README.md", "vflcore", "vflprivacy", "vflalgorithms", "vflserver", "vflclient")


def build_wheel(folder: Path) -> Path:
    """The project's wheel in ``folder``, built by the first caller; the others wait and reuse it."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(folder.glob("vfl_service-*.whl"))
        if built:
            return built[-1]
        with tempfile.TemporaryDirectory(prefix="vfl-wheel-src-") as scratch:
            source = Path(scratch) / "src"
            source.mkdir()
            for name in SOURCES:
                path = ROOT / name
                if path.is_dir():
                    shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
                else:
                    shutil.copy2(path, source / name)
            # No build isolation: it would download setuptools; the test environment has it.
            command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
            _run([*command, "--wheel-dir", str(folder), str(source)])
        [wheel] = folder.glob("vfl_service-*.whl")
        return wheel


def install_host(venv: Path, wheel: Path) -> Path:
    """A fresh venv at ``venv`` with ``wheel`` installed (``--no-deps``); returns its ``bin`` folder."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    # This environment's pip installs into the new venv (pip --python): the venv needs no pip of its own.
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet"]
    # From the venv's folder and without PYTHONPATH: pip's Python puts its working directory on the
    # path, and if the checkout were on it, pip would find the editable install's metadata there and
    # call the wheel "already installed".
    _run([*pip, str(wheel)], cwd=venv, env=CLEAN_ENV)
    site = Path(_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))
    (site / "shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def install_from_wheelhouse(venv: Path, wheelhouse: Path) -> Path:
    """A fresh venv at ``venv`` with the project installed by name from ``wheelhouse``, no index; its ``bin``."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    shared = venv / "shared-dependencies"
    shared.mkdir()
    ours = ("vfl_service-", "__editable__", "__editable___vfl_service")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(ours):
            (shared / entry.name).symlink_to(entry)
    site = Path(_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))
    (site / "shared_dependencies.pth").write_text(f"{shared}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--quiet"]
    _run([*pip, "--find-links", str(wheelhouse), "vfl-service"], cwd=venv, env=CLEAN_ENV)
    return venv / "bin"


def installed_from(bin_dir: Path, command_prefix: list[str]) -> Path:
    """Where the host's Python imports the project from (run with ``command_prefix``, e.g. in its namespace)."""
    code = "import vflserver, vflclient; print(vflserver.__file__)"
    return Path(_output([*command_prefix, str(bin_dir / "python"), "-c", code], cwd=bin_dir)).parent


def _run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}:\n{done.stdout}{done.stderr}")


def _output(argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=CLEAN_ENV)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {done.returncode}:\n{done.stderr}")
    return done.stdout.strip()
