"""Session fixtures every test may use: a PKI made by the project's own tooling, and data files.

Certificates come from ``vfltesting.pki``, which uses ``vflcore.security.certs`` (what
``vfl-certs`` runs), so the tests exercise the same issuance a user gets. Everything lives under
pytest's tmp dirs; no fixed ports anywhere.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from vfltesting.forked import SHARED_ENV, Launcher
from vfltesting.pki import Pki, issue_pki

#: The test files that take longest (``--durations``, 2 cores), slowest first. xdist hands out
#: whole files (``--dist loadfile``) in collection order, so these go first: a long file started
#: last would keep one worker busy long after the other ran out of work. A file missing here
#: only loses its head start; order never changes what a test checks.
SLOWEST_FIRST = (
    # The separate-hosts files wait out 60 s link outages with little CPU: one worker runs both, as
    # one unit (SAME_WORKER), from the start, beside the CPU-bound recovery files.
    "test_separate_hosts_training_faults.py",
    "test_separate_hosts.py",
    "test_recovery.py",
    "test_recovery_others.py",
    "test_recovery_adptvfedconv.py",
    "test_embedding_privacy.py",
    "test_label_protection.py",
    "test_service.py",
    "test_fuzz.py",
    "test_bench_privacy_smoke.py",
    "test_own_models.py",
)

#: Files that xdist hands to one worker as one unit, by the unit's name. The separate-hosts files
#: spend most of their 250 s of wall time (one deployment for both, 2026-11-29) waiting out link
#: outages: each on a worker of its own, two of the three workers idled at once while one worker's
#: daemons had the two cores to themselves; together they leave two workers, one per core, for the CPU-bound files.
SAME_WORKER = {
    "test_separate_hosts_training_faults.py": "separate hosts",
    "test_separate_hosts.py": "separate hosts",
    # One SplitNN digits job (tests/integration/algorithms/conftest.py, ``splitnn_digits``) serves
    # all three: on one worker it runs once, where two more jobs ran before (about 4 CPU-s less, 2026-11-29).
    "test_reference_equivalence.py": "splitnn digits",
    "test_wire_codecs.py": "splitnn digits",
    "test_client_importance.py": "splitnn digits",
}

#: Ray Data's usage poller: a thread that Ray Data starts in the driver (here a pytest worker, in
#: test_ray_engine's scoring tests) and never stops. Every 10 s it queries a Prometheus that is not
#: there and logs the failure at DEBUG with its traceback, which pytest's log capture formats; on
#: Python 3.11.7, formatting a traceback runs ``ast.parse``, and ``ast.parse`` in two threads at
#: once can raise "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905,
#: fixed in 3.11.8). It did, in test_layout's own ``ast.parse``, in a fresh-clone CI run
#: (2026-11-28). At INFO the poller's records are never made, so nothing is formatted.
logging.getLogger("ray.data._internal.usage").setLevel(logging.INFO)


#: The daemon launcher an xdist run's controller starts for its workers (``pytest_sessionstart``).
SHARED_LAUNCHER = pytest.StashKey[Launcher]()
UNIT_TESTS = Path(__file__).parent / "unit"


def pytest_sessionstart(session: pytest.Session) -> None:
    """In an xdist run's controller, before its workers start: one daemon launcher for all of them.

    Each worker attaches to it (``forked_daemons`` in tests/integration/conftest.py) instead of
    starting its own, which cost about 7 CPU-s of imports a worker (``vfltesting.forked``). Not for a
    run of unit tests only, which forks no daemon.
    """
    config = session.config
    if not config.pluginmanager.has_plugin("dsession"):
        return  # one process (-n 0), or an xdist worker: the fixture starts or finds one
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    if all(path.is_relative_to(UNIT_TESTS) for path in paths):
        return
    from vfltesting.service import service_env  # imports the client SDK: not for a unit-only run

    launcher = config.stash[SHARED_LAUNCHER] = Launcher.shared(service_env())
    os.environ[SHARED_ENV] = launcher.address  # the workers, started after this, inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller's shared launcher ends after every worker has: any daemon left is killed."""
    launcher = config.stash.get(SHARED_LAUNCHER, None)
    if launcher is not None:
        launcher.close()
        os.environ.pop(SHARED_ENV, None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, plus one.

    Why the extra one: the separate-hosts files spend minutes waiting out 60 s link outages with
    next to no CPU, and with one worker per core that worker's core idled meanwhile. Measured on
    the 2-core machine (2026-11-27): the whole suite took 685 s with 2 workers, 506 s with 3.
    Not more: with the separate-hosts files on one worker (``SAME_WORKER``), a fresh clone's suite
    took 852.75 s with 4 workers against 747.81 s with 3 (2-core machine, quiet, 2026-11-29).
    """
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, but the files of ``SAME_WORKER`` go to one worker as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None  # another mode asked for on the command line: xdist's own
    from xdist.scheduler import LoadFileScheduling

    class FilesAndGroups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(path.rsplit("/", 1)[-1], path)

    return FilesAndGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first, then the other integration tests, then the unit tests; skip
    every ``cuda`` test on a host where torch sees no GPU (the CPU-only CI machines)."""
    import torch

    items.sort(key=_start_order)  # stable: each file's tests keep their order, and stay together
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch sees none on this host")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def _start_order(item: pytest.Item) -> int:
    name = item.path.name
    if name in SLOWEST_FIRST:
        return SLOWEST_FIRST.index(name)
    return len(SLOWEST_FIRST) + (0 if "integration" in item.path.parts else 1)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """One project CA: the server, parties 2 to 4, operator "alice" and inference caller "test-caller"."""
    return issue_pki(tmp_path_factory.mktemp("pki"), (2, 3, 4), callers=("test-caller",))


# The data fixtures import ``vfltesting.datasets`` when first used: scikit-learn takes about 3 CPU-s
# to import, and an xdist run's controller process, which loads this file too, uses none of them.
@pytest.fixture(scope="session")
def digits_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """party1.csv (labels + image rows 0-2), party2.csv (rows 3-5), party3.csv (rows 6-7)."""
    from vfltesting.datasets import write_digits_split

    out = tmp_path_factory.mktemp("digits")
    write_digits_split(out, seed=0)
    return out


@pytest.fixture(scope="session")
def cancer_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Breast cancer, standardised: party1.csv (labels + features 0-9), party2.csv (10-19), party3.csv (20-29)."""
    from vfltesting.datasets import write_cancer_split

    out = tmp_path_factory.mktemp("cancer")
    write_cancer_split(out, seed=0)
    return out


@pytest.fixture(scope="session")
def digits_quadrants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """party1.csv (labels + the top-left 4x4 quadrant) and party2-4.csv (the other quadrants), every sample."""
    from vfltesting.datasets import write_digits_quadrants

    out = tmp_path_factory.mktemp("quadrants")
    write_digits_quadrants(out, seed=0)
    return out


@pytest.fixture(scope="session")
def diabetes_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A regression task split over three parties (party1.csv holds the target)."""
    from vfltesting.datasets import write_diabetes_split

    out = tmp_path_factory.mktemp("diabetes")
    write_diabetes_split(out, seed=0)
    return out


@pytest.fixture
def restore_logging(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Undo main()'s logging setup before capsys closes the stream it points at.

    Depending on capsys makes this fixture's teardown run first, so server threads that log
    while ``job_factory`` tears down still write to an open stream.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root.handlers[:] = handlers
    root.setLevel(level)
