"""The dev tools are pinned exactly, and only they (issue 41: the same run on every fresh machine).

``constraints/dev.txt`` holds an exact ``==`` version for every tool in pyproject.toml's ``dev``
extra, and ``make venv`` installs through it. The product's runtime dependencies and the ``ray``
extra keep their ranges for users, so none of them may be pinned there. Reads files only.
"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from vfltesting.paths import REPO_ROOT as ROOT

CONSTRAINTS = ROOT / "constraints" / "dev.txt"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    found = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r for r in found}


def _pins() -> dict[str, Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines()]
    return _requirements([line for line in lines if line])


def _exact(requirement: Requirement) -> str | None:
    """The version of a ``name==X`` requirement, None for anything else (a range, ===, a wildcard)."""
    specifiers = list(requirement.specifier)
    if len(specifiers) == 1 and specifiers[0].operator == "==" and "*" not in specifiers[0].version:
        return specifiers[0].version
    return None


DEV = _requirements(PROJECT["optional-dependencies"]["dev"])
RUNTIME = _requirements(PROJECT["dependencies"])
OTHER_EXTRAS = _requirements(
    [line for extra, lines in PROJECT["optional-dependencies"].items() if extra != "dev" for line in lines]
)


def test_every_line_is_one_plain_pin() -> None:
    """No extras, markers, URLs or options: a constraints file takes ``name==version`` lines."""
    for name, requirement in _pins().items():
        assert not requirement.extras and requirement.marker is None and requirement.url is None, name
        assert _exact(requirement) is not None, f"{requirement}: pin it with =="


def test_every_dev_tool_is_pinned_exactly() -> None:
    pins = _pins()
    missing = sorted(set(DEV) - set(pins))
    assert not missing, f"dev tools without a pin in constraints/dev.txt: {missing}"
    for name, requirement in DEV.items():
        version = _exact(pins[name])
        assert version is not None, f"{pins[name]}: not an exact pin"
        # the pin must be a version the extra admits, or pip refuses the install
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{name}=={version} is outside pyproject.toml's dev range {requirement.specifier}"
        )


def test_no_runtime_dependency_is_pinned() -> None:
    """Users get the product's own ranges: grpcio, torch, numpy, ... and the ray extra stay unpinned."""
    pinned = set(_pins())
    assert not pinned & set(RUNTIME), f"runtime dependencies pinned: {sorted(pinned & set(RUNTIME))}"
    assert not pinned & set(OTHER_EXTRAS), f"other extras pinned: {sorted(pinned & set(OTHER_EXTRAS))}"


def test_make_venv_installs_through_the_constraints() -> None:
    """The venv rule depends on the file (a changed pin reinstalls) and passes it to pip with -c."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^CONSTRAINTS := constraints/dev\.txt$", makefile, re.MULTILINE)
    assert re.search(r"^\$\(STAMP\):.*\$\(CONSTRAINTS\)", makefile, re.MULTILINE)
    assert re.search(r"^\t\$\(PIP\) install .*-c \$\(CONSTRAINTS\) -e '\.\[dev,ray\]'$", makefile, re.MULTILINE)
