"""The layout's rules, checked on the source: who may import whom, and no branching on algorithm names.

The folders are the architecture (docs/explanation/architecture.md): ``vflcore`` at the bottom, the
algorithms above it, the two daemons on top and apart from each other, and ``vfltesting`` for
tests, benches and examples only. Inside ``vflserver`` the folders are floors too, and no product
module passes 500 lines. A rule that only lives in a document decays; these tests keep it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from vflalgorithms.base import algorithms

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("vflcore", "vflprivacy", "vflalgorithms", "vflserver", "vflclient")

#: For each product package, the top-level packages of this repository it must never import.
FORBIDDEN = {
    "vflcore": {"vflprivacy", "vflalgorithms", "vflserver", "vflclient", "vfltesting", "tests", "bench", "examples"},
    "vflprivacy": {"vflalgorithms", "vflserver", "vflclient", "vfltesting", "tests", "bench", "examples"},
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


#: The floors inside ``vflserver``, bottom to top: a module imports its own folder and those below.
#: ``vflserver/cli.py`` (``vfl-server``) is the top and may import any of them.
SERVER_FLOORS = ("federation", "inference", "scoring", "training", "jobs", "console", "cli")


def _server_floor(parts: tuple[str, ...]) -> int | None:
    """The floor of ``vflserver`` a module path (``("vflserver", "jobs", "store")``) sits on."""
    if len(parts) < 2 or parts[0] != "vflserver":
        return None
    return SERVER_FLOORS.index(parts[1]) if parts[1] in SERVER_FLOORS else None


def test_vflserver_folders_import_only_their_own_floor_and_below() -> None:
    """federation < inference < scoring < training < jobs < console < cli.py: no import reaches up or sideways."""
    wrong = []
    for path in _modules("vflserver"):
        own = _server_floor(path.relative_to(ROOT).with_suffix("").parts)
        assert own is not None or path.name == "__init__.py", f"{path.relative_to(ROOT)} is on no floor"
        for line, name in _imports(path):
            floor = _server_floor(tuple(name.split(".")))
            if own is not None and floor is not None and floor > own:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name} ({SERVER_FLOORS[floor]} is above)")
    assert not wrong, "\n".join(wrong)


#: The most lines a product module may have: past it, a module holds more than one job.
MAX_MODULE_LINES = 500


def test_no_product_module_is_over_500_lines() -> None:
    """Every product module fits in 500 lines; generated protobuf code (``*_pb2*.py``) aside."""
    long = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for package in PRODUCT
        for path in _modules(package)
        if not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "\n".join(long)


#: The floors inside ``vflcore``, bottom to top (issue 40): a module imports its own floor and those
#: below. The leaves first (errors and how a settings table is read; the [privacy] tables,
#: identities, memory knobs, generated code); then the job; what travels (wire, work items, the
#: job's rules); tables; models; the daemons' runtime (config, logs, signals); PSI, which runs on
#: all of them. ``deploy`` holds files.
VFLCORE_FLOORS = (
    {"errors", "deploy", "settings"},
    {"status", "absence", "security", "privacy", "party_privacy", "proto", "memory"},
    {"job"},
    {"wire", "work_items", "job_rules"},
    {"data"},
    {"ml"},
    {"runtime"},
    {"psi"},
)


def _core_floor(name: str) -> int:
    found = [i for i, floor in enumerate(VFLCORE_FLOORS) if name in floor]
    assert found, f"vflcore.{name} is on no floor of VFLCORE_FLOORS: add it where it belongs"
    return found[0]


def test_vflcore_folders_import_only_their_own_floor_and_below() -> None:
    """errors < leaves < job < wire < data < ml < runtime < psi: no import in vflcore reaches up."""
    wrong = []
    for path in _modules("vflcore"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if len(parts) < 2 or parts[1] == "__init__":
            continue
        own = _core_floor(parts[1])
        for line, name in _imports(path):
            target = name.split(".")
            inside = target[0] == "vflcore" and len(target) > 1 and target[1] != parts[1]
            if inside and _core_floor(target[1]) > own:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name} (a floor above)")
    assert not wrong, "\n".join(wrong)


#: The folders whose modules the rule below reads: the product, its test kit, the benches, the tests.
_ALL_CODE = ("vflcore", "vflprivacy", "vflalgorithms", "vflserver", "vflclient", "vfltesting", "bench", "tests")


def test_no_private_name_crosses_a_package() -> None:
    """A ``_name`` is imported only inside its own package: what another package needs is made public and named so."""
    ours = {"vflcore", "vflprivacy", "vflalgorithms", "vflserver", "vflclient", "vfltesting", "bench"}
    crossing = []
    for folder in _ALL_CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            importer = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
                    continue
                if node.module.split(".")[0] not in ours:
                    continue
                package = (
                    node.module.rpartition(".")[0]
                    if (ROOT / node.module.replace(".", "/")).with_suffix(".py").exists()
                    else node.module
                )
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and package != importer:
                        crossing.append(
                            f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} from {node.module}"
                        )
    assert not crossing, "\n".join(crossing)
