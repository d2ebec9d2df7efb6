"""The recovery files' daemons: one set a module (``shared``), checked alive before each test (``service``).

A module's clean and faulty jobs run on the same three daemons, each job under its own id: a job id
changes no seed and no row order, and a set of daemons a job cost eight daemon starts more. A module
that needs other daemons (more parties, other limits) defines its own ``shared``; ``service`` then
checks those. In this folder ``service`` is these daemons, not the in-process service of
``tests/integration/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vfltesting.faults import restart_after_kill, service_with_short_limits
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun


@pytest.fixture(scope="module")
def shared(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """One server and both passive daemons for the module's jobs (each under its own job id)."""
    run = service_with_short_limits(tmp_path_factory.mktemp("shared"), pki, digits_data)
    try:
        yield run
    finally:
        run.close()


@pytest.fixture
def service(shared: ServiceRun) -> ServiceRun:
    """The shared daemons, every one running: one a failed test left killed is started again."""
    for name, alive in shared.alive().items():
        if not alive:
            restart_after_kill(shared, name)
    return shared
