"""The layout's rules, checked on the source: who may import whom, and no branching on algorithm names.

The folders are the architecture (docs/architecture.md): ``vflcore`` at the bottom, the
algorithms above it, the two daemons on top and apart from each other, and ``vfltesting`` for
tests, benches and examples only. A rule that only lives in a document decays; these tests keep it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from vflalgorithms.base import algorithms

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("vflcore", "vflalgorithms", "vflserver", "vflclient")

#: For each product package, the top-level packages of this repository it must never import.
FORBIDDEN = {
    "vflcore": {"vflalgorithms", "vflserver", "vflclient", "vfltesting", "tests", "bench", "examples"},
    "vflalgorithms": {"vflserver", "vflclient", "vfltesting", "tests", "bench", "examples"},
    "vflserver": {"vflclient", "vfltesting", "tests", "bench", "examples"},
    "vflclient": {"vflserver", "vfltesting", "tests", "bench", "examples"},
}


def _modules(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


@pytest.mark.parametrize("package", PRODUCT)
def test_imports_follow_the_layers(package: str) -> None:
    """No product module imports a package above its layer, the other daemon, or the test-only code."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in _modules(package)
        for line, name in _imports(path)
        if name.split(".")[0] in FORBIDDEN[package]
    ]
    assert not wrong, "\n".join(wrong)


def _branches_on(path: Path, names: set[str]) -> Iterator[str]:
    """Comparisons and match cases against an algorithm's name: what a new algorithm would have to edit."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        for operand in operands:
            values = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            for value in values:
                if isinstance(value, ast.Constant) and value.value in names:
                    yield f"{path.relative_to(ROOT)}:{node.lineno} compares with {value.value!r}"


@pytest.mark.parametrize("package", ["vflcore", "vflserver", "vflclient"])
def test_daemons_never_branch_on_an_algorithm_name(package: str) -> None:
    """The daemons, the servicer, the connection and the core find algorithms through the registry only."""
    names = set(algorithms())
    found = [hit for path in _modules(package) for hit in _branches_on(path, names)]
    assert not found, "\n".join(found)


def test_vfltesting_is_not_installed_with_the_product() -> None:
    """pyproject's package list names the product packages and leaves vfltesting out."""
    text = (ROOT / "pyproject.toml").read_text()
    include = next(line for line in text.splitlines() if line.startswith("include = ["))
    assert all(f'"{package}*"' in include for package in PRODUCT)
    assert "vfltesting" not in include.split("#")[0]
