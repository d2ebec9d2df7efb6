"""A passive party's datasets in memory: one table per file, however many names point at it.

At 10M rows x 30 features a table is 1.2 GB; two dataset names for one file (a config that keeps
an old name, say) must not hold it twice.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from vflclient import Connection
from vflclient._daemon import PartyDaemon
from vflcore.errors import ConfigError
from vflcore.runtime.config import ClientConfig, DataSource


def _write(path: Path, rows: int) -> Path:
    path.write_text("id,x\n" + "".join(f"u{i},{i}.5\n" for i in range(rows)))
    return path


def _daemon(datasets: dict[str, DataSource]) -> PartyDaemon:
    def refuse(stop: threading.Event) -> Connection:
        raise AssertionError("no connection in this test")

    return PartyDaemon(ClientConfig(party=2, tls=None, datasets=datasets), refuse)


def test_two_names_for_one_file_share_one_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "party2.csv", 5)
    daemon = _daemon({"old": DataSource(path), "new": DataSource(tmp_path / "." / "party2.csv")})
    assert daemon._table("old") is daemon._table("new")


def test_another_file_is_another_table(tmp_path: Path) -> None:
    one, two = _write(tmp_path / "a.csv", 3), _write(tmp_path / "b.csv", 4)
    daemon = _daemon({"a": DataSource(one), "b": DataSource(two)})
    assert daemon._table("a").num_rows == 3
    assert daemon._table("b").num_rows == 4


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = _write(tmp_path / "party2.csv", 3)
    daemon = _daemon({"d": DataSource(path)})
    assert daemon._table("d").num_rows == 3
    _write(path, 6)
    stamp = path.stat().st_mtime + 10
    os.utime(path, (stamp, stamp))
    assert daemon._table("d").num_rows == 6


def test_an_unknown_name_is_refused_naming_it(tmp_path: Path) -> None:
    daemon = _daemon({"d": DataSource(_write(tmp_path / "p.csv", 2))})
    with pytest.raises(ConfigError, match="missing"):
        daemon._table("missing")
