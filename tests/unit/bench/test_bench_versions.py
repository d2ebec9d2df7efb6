"""Every bench prints the versions of the libraries that decide its result (issue 41).

The benches the Makefile runs (``$(PY) -m bench...`` under a ``bench-*`` target) each print
``versions_line(...)`` from ``bench.common.versions`` in ``main``; checked in the source, so no
bench runs here.
"""

from __future__ import annotations

import ast
import importlib.metadata
import platform
import re
from pathlib import Path

import pytest

from bench.common.versions import ABSENT, versions_line
from vfltesting.paths import REPO_ROOT as ROOT


def _bench_targets() -> dict[str, list[str]]:
    """Each ``bench-*`` target and the modules its recipe runs, in the Makefile's order."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipes = re.findall(r"^(bench-[\w-]+):[^\n]*\n((?:\t[^\n]*\n)*)", makefile, re.MULTILINE)
    return {target: re.findall(r"\$\(PY\) -m (bench[\w.]*)", recipe) for target, recipe in recipes}


def _source(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__main__.py" if path.is_dir() else path.with_suffix(".py")


TARGETS = _bench_targets()
MODULES = [module for modules in TARGETS.values() for module in modules]


def test_every_bench_target_runs_one_bench_module() -> None:
    assert len(TARGETS) >= 18, TARGETS
    assert all(len(modules) == 1 for modules in TARGETS.values()), TARGETS
    assert "bench.operations.fuzz" in MODULES and "bench.psi" in MODULES


def _printed_versions_line(node: ast.AST) -> ast.Call | None:
    """The ``versions_line(...)`` call of a ``print(versions_line(...), ...)``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" and node.args:
        inner = node.args[0]
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "versions_line":
            return inner
    return None


@pytest.mark.parametrize("module", MODULES)
def test_main_prints_the_versions_line(module: str) -> None:
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    imported = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "bench.common.versions"
        and any(alias.name == "versions_line" and alias.asname is None for alias in node.names)
        for node in tree.body
    )
    assert imported, f"{module}: from bench.common.versions import versions_line"
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    calls = [call for node in ast.walk(main) if (call := _printed_versions_line(node)) is not None]
    assert len(calls) == 1, f"{module}: main() prints versions_line(...) once"
    named = calls[0].args
    assert named and all(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in named), (
        f"{module}: versions_line names the distributions that decide the result"
    )


def test_an_installed_and_a_missing_distribution_are_both_named() -> None:
    line = versions_line("numpy", "no-such-dist")
    numpy = importlib.metadata.version("numpy")
    assert line == f"versions: python {platform.python_version()}, numpy {numpy}, no-such-dist {ABSENT}"


def test_versions_the_bench_knows_itself_come_last() -> None:
    line = versions_line("numpy", others={"spu": "0.9.5"})
    assert line.startswith("versions: python ") and line.endswith(", spu 0.9.5")
