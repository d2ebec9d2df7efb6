"""Where the repository is: for the tests and benches that read its files (docs, configs, pyproject).

A test's own path says nothing reliable about the root once tests sit in folders of different
depths (``tests/unit/vflcore/psi/``, ``tests/integration/service/``); this module's does.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root: the folder that holds ``pyproject.toml`` and the packages.
REPO_ROOT = Path(__file__).resolve().parents[1]
