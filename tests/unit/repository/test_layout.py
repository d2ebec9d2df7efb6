"""The layout's rules, checked on the source: who may import whom, and no branching on algorithm names.

The folders are the architecture (docs/explanation/architecture.md): ``vflcore`` at the bottom, the
algorithms above it, the two daemons on top and apart from each other, and ``vfltesting`` for
tests, benches and examples only. Inside ``vflserver`` the folders are floors too, and no product
module passes 500 lines. The tests mirror the product too: ``tests/unit/<package>/`` and
``tests/integration/<feature>/``, and no test module imports another. A rule that only lives in
a document decays; these tests keep it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from vflalgorithms.registry import algorithms
from vfltesting.paths import REPO_ROOT as ROOT

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


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """The nodes of a module the rules below look at (imports, comparisons, ``setting(...)`` calls), parsed
    and walked once a session: they read the product six times and tests/ twice. Only these are kept,
    not the whole tree: every tree cached cost the process about 120 MB."""
    return tuple(
        node
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Compare | ast.MatchValue)
        or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setting")
    )


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in _nodes(path):
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
    for node in _nodes(path):
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
SERVER_FLOORS = ("federation", "inference", "scoring", "plan", "training", "jobs", "console", "cli")


def _server_floor(parts: tuple[str, ...]) -> int | None:
    """The floor of ``vflserver`` a module path (``("vflserver", "jobs", "store")``) sits on."""
    if len(parts) < 2 or parts[0] != "vflserver":
        return None
    return SERVER_FLOORS.index(parts[1]) if parts[1] in SERVER_FLOORS else None


def test_vflserver_folders_import_only_their_own_floor_and_below() -> None:
    """federation < inference < scoring < plan < training < jobs < console < cli.py: nothing reaches up or sideways."""
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
#: below. The leaves first (errors and how a settings table is read; identities, memory knobs,
#: generated code); then the job (its spec, schedule, rules, ``[privacy]`` and ``[distill]``
#: tables: one package, issue 49); what travels (wire, work items) and a party's own ``[privacy]``
#: minimum, held against the job's; tables; models; the daemons' runtime (config, logs, signals);
#: PSI, which runs on all of them. ``deploy`` holds files.
VFLCORE_FLOORS = (
    {"errors", "deploy", "settings"},
    {"status", "absence", "security", "proto", "memory"},
    {"job"},
    {"wire", "work_items", "party_privacy"},
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
            for node in _nodes(path):
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


#: A job's two homes (issue 49): what every party knows and checks of it, and what the active party runs.
JOB_HOMES = ("vflcore/job/", "vflserver/plan/")
#: The tables only a job document holds; ``[privacy]``, ``[model]`` and ``[serving]`` are also a daemon's own.
_JOB_ONLY_TABLES = {"job", "distill"}


def test_a_job_is_declared_in_its_two_homes() -> None:
    """Every setting of a job's own tables ([job], [distill]) is declared in vflcore/job/ or vflserver/plan/."""
    strays = []
    for package in PRODUCT:
        for path in _modules(package):
            where = path.relative_to(ROOT).as_posix()
            for node in _nodes(path):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setting"):
                    continue
                table = node.args[0] if node.args else None
                ours = isinstance(table, ast.Constant) and table.value in _JOB_ONLY_TABLES
                if ours and not where.startswith(JOB_HOMES):
                    strays.append(f"{where}:{node.lineno} declares a [{table.value}] setting")
    assert not strays, "\n".join(strays)


#: The first folder under ``tests/unit/``: a package of this repository, or ``repository`` for the
#: rules about the whole of it (this file, the pinned tools, the daemons' help, the docs' reference pages).
UNIT_FOLDERS = {*PRODUCT, "vfltesting", "bench", "repository"}
#: The folders under ``tests/integration/``: one per feature a user meets, each test file in one.
INTEGRATION_FEATURES = {
    "algorithms",
    "hosts",
    "inference",
    "privacy",
    "psi",
    "recovery",
    "security",
    "service",
    "training",
}
#: The files the tests tree may hold: tests, pytest's fixtures, and the packages' markers. Anything
#: shared between test modules belongs in ``vfltesting`` (or a conftest.py fixture), not here.
_TEST_TREE_FILES = ("conftest.py", "__init__.py")


def _test_files() -> list[Path]:
    return sorted(path for path in (ROOT / "tests").rglob("*.py") if path.name not in _TEST_TREE_FILES)


def test_no_test_module_imports_another() -> None:
    """No module under tests/ imports from ``tests``: what two tests share lives in vfltesting or a fixture."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in _nodes(path):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports relatively (from {'.' * node.level})")
            for line, name in _imports_of(node):
                if name.split(".")[0] == "tests":
                    found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not found, "\n".join(found)


def _imports_of(node: ast.AST) -> Iterator[tuple[int, str]]:
    if isinstance(node, ast.Import):
        yield from ((node.lineno, alias.name) for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        yield node.lineno, node.module


def test_the_tests_tree_holds_only_tests() -> None:
    """Every module under tests/ is a ``test_*.py``, a ``conftest.py`` or an ``__init__.py``."""
    others = [str(path.relative_to(ROOT)) for path in _test_files() if not path.name.startswith("test_")]
    assert not others, "move these into vfltesting (or a conftest.py fixture):\n" + "\n".join(others)


def test_unit_test_folders_mirror_the_packages() -> None:
    """``tests/unit/<package>/<subpackage>/test_*.py``: each folder names a package and subpackage that exist."""
    wrong = []
    for path in _test_files():
        parts = path.relative_to(ROOT / "tests").parts
        if parts[0] != "unit":
            continue
        folders = parts[1:-1]
        if not folders or folders[0] not in UNIT_FOLDERS:
            wrong.append(f"{path.relative_to(ROOT)}: not in a folder of {sorted(UNIT_FOLDERS)}")
        elif folders[0] != "repository" and not ROOT.joinpath(*folders).is_dir():
            wrong.append(f"{path.relative_to(ROOT)}: there is no package {'.'.join(folders)}")
    assert not wrong, "\n".join(wrong)


def test_integration_test_folders_are_features() -> None:
    """``tests/integration/<feature>/test_*.py``, one folder deep, the feature one of ``INTEGRATION_FEATURES``."""
    wrong = [
        f"{path.relative_to(ROOT)}: not in one of {sorted(INTEGRATION_FEATURES)}"
        for path in _test_files()
        if (parts := path.relative_to(ROOT / "tests").parts)[0] == "integration"
        and (len(parts) != 3 or parts[1] not in INTEGRATION_FEATURES)
    ]
    stray = [p for p in _test_files() if p.relative_to(ROOT / "tests").parts[0] not in ("unit", "integration")]
    assert not wrong and not stray, "\n".join(
        wrong + [f"{p.relative_to(ROOT)}: not under unit/ or integration/" for p in stray]
    )


def test_every_test_folder_is_a_package() -> None:
    """An ``__init__.py`` in every folder under tests/: test files in different folders may share a name
    (``unit/vflcore/runtime/test_log_file.py``, ``integration/service/test_log_file.py``)."""
    bare = [
        str(folder.relative_to(ROOT))
        for folder in sorted({ROOT / "tests", *(p for p in (ROOT / "tests").rglob("*") if p.is_dir())})
        if folder.name != "__pycache__" and not (folder / "__init__.py").exists()
    ]
    assert not bare, "\n".join(bare)
