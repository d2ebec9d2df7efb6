"""The versions of the libraries that decide a bench's result, as one line for its header (issue 41).

A bench's figures depend on more than this repository: hypothesis decides which fuzz cases are
drawn, torch and numpy the training arithmetic, pyarrow the reader the project is measured
against. Each bench names those libraries and prints ``versions_line(...)`` right after its first
header line, so that two outputs from two machines say by themselves whether they ran the same
code. The versions are the installed distributions' (``importlib.metadata``), not what a module
says about itself, and a distribution that is not installed reads ``absent``.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version

ABSENT = "absent"


def distribution_version(name: str) -> str:
    """The installed version of the distribution ``name`` (its pip name), or ``absent``."""
    try:
        return version(name)
    except PackageNotFoundError:
        return ABSENT


def versions_line(*distributions: str, others: Mapping[str, str] | None = None) -> str:
    """``versions: python 3.11.7, torch 2.13.0+cpu, numpy 2.4.6``: Python, then each distribution
    in the order given; ``others`` appends versions the bench knows by other means (a tool it runs
    from its own virtualenv), labelled as given."""
    parts = [f"python {platform.python_version()}"]
    parts += [f"{name} {distribution_version(name)}" for name in distributions]
    parts += [f"{label} {known}" for label, known in (others or {}).items()]
    return "versions: " + ", ".join(parts)
