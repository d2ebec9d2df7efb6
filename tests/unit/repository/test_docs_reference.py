"""The reference pages that code can check: exit codes, and the README as the site's front door.

The settings tables are checked in ``tests/unit/vflcore/runtime/test_config.py`` and
``tests/unit/vflserver/training/test_label_protection_jobs.py``, the metrics table in
``tests/unit/vflserver/jobs/test_service_metrics.py``; links and anchors by ``make docs`` (mkdocs
``--strict``). Reads files and imports modules only.
"""

from __future__ import annotations

import re
from types import ModuleType

from vflclient import jobs_cli
from vflcore.runtime import daemon
from vflcore.runtime.config import DATA_KEYS, TLS_KEYS, client_tables, server_tables
from vfltesting.paths import REPO_ROOT as ROOT

CLI = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
CONFIGURATION = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")


def exit_codes(module: ModuleType) -> set[int]:
    """Every ``EXIT_*`` constant a command module declares."""
    return {value for name, value in vars(module).items() if name.startswith("EXIT_") and isinstance(value, int)}


def codes_in_table(heading: str) -> set[int]:
    """The first column of the first ``| code |`` table after a heading of the CLI reference."""
    start = CLI.index(f"{heading}\n")
    table = CLI[CLI.index("| code |", start) :].split("\n\n", 1)[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)}


class TestExitCodes:
    """``docs/reference/cli.md`` lists each command's exit codes as the code declares them, and no other."""

    def test_the_one_job_table_is_the_daemons_codes(self) -> None:
        once = CLI.index("With `--once` (one job")
        table = CLI[CLI.index("| code | meaning |", once) :].split("\n\n", 1)[0]
        documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
        assert documented == exit_codes(daemon)

    def test_the_service_table_uses_only_the_daemons_codes(self) -> None:
        assert codes_in_table("## Exit codes") <= exit_codes(daemon)

    def test_the_vfl_jobs_table_is_its_codes(self) -> None:
        assert codes_in_table("### `vfl-jobs` exit codes") == exit_codes(jobs_cli)


def documented_tables(part: str) -> dict[str, set[str]]:
    """A config file's part of the reference: each ``### `[table]``` heading -> the keys of its tables."""
    start = CONFIGURATION.index(part)
    end = CONFIGURATION.find("\n## ", start + 1)
    tables: dict[str, set[str]] = {}
    for section in re.split(r"^### ", CONFIGURATION[start:end], flags=re.M)[1:]:
        names = re.findall(r"`\[(\w+)\]`", section.split("\n", 1)[0].split(":", 1)[0])
        keys = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))
        for name in names:
            tables.setdefault(name, set()).update(keys)
    return tables


class TestConfigTables:
    """Every table a config file may hold is in the reference, and no other; ``test_config.py`` checks the keys.

    This adds the tables whose keys no settings class declares: ``[tls]`` and ``[data]``, read by hand.
    """

    def test_the_server_configs_tables(self) -> None:
        documented = documented_tables("## `server.toml`")
        assert set(documented) == set(server_tables())
        assert documented["tls"] == set(TLS_KEYS)
        assert documented["data"] == set(DATA_KEYS)

    def test_a_partys_tables(self) -> None:
        documented = documented_tables("## `partyN.toml`")
        assert set(documented) == set(client_tables())
        assert documented["tls"] == set(TLS_KEYS)
        # A passive party's [data] takes a path and an ID column. The reader shares DATA_KEYS with
        # the server's, refuses held_out_ids with its own message, and ignores a label_column.
        assert documented["data"] == {"path", "id_column"} < set(DATA_KEYS)


class TestSiteBuild:
    """``make test`` builds the site in strict mode, where a broken link or anchor fails it."""

    MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")

    def test_make_test_runs_make_docs(self) -> None:
        assert re.search(r"^test:.*\bdocs\b", self.MAKEFILE, flags=re.M)

    def test_make_docs_builds_strict_and_shows_the_warnings(self) -> None:
        """``--quiet`` hides the warnings, and ``--strict`` fails only on warnings it was shown."""
        recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", self.MAKEFILE, flags=re.M)
        assert recipe is not None
        assert "mkdocs build --strict" in recipe.group(1)
        assert not re.search(r"\s(-q|--quiet)\b", recipe.group(1))

    def test_the_config_is_strict_about_every_link(self) -> None:
        config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
        for check in ("omitted_files", "absolute_links", "unrecognized_links", "anchors", "not_found"):
            assert re.search(rf"^  {check}: warn$", config, flags=re.M), check


class TestReadme:
    """The README stays a front door: short, with the two commands, its links into the site alive."""

    README = (ROOT / "README.md").read_text(encoding="utf-8")

    def test_it_is_short(self) -> None:
        assert len(self.README.encode()) <= 16_000, "the README is over 16 KB: move the detail into docs/"

    def test_it_shows_make_demo_and_make_test(self) -> None:
        assert "make demo" in self.README and "make test" in self.README

    def test_every_relative_link_names_a_file(self) -> None:
        links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", self.README)
        missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
        assert not missing, f"README links to files that are not there: {missing}"
