"""Fuzz targets run in the campaign's own process: the table reader, PSI on any IDs, a party's config.

These surfaces are inputs a party gives itself (its files, its config), not messages from a
peer, so they are driven through the product's own functions rather than over the wire: the
reader every daemon uses (``read_party_csv``), PSI's hash-to-curve, blinding and matching, and
``client_config_from``. The same files also reach the live server (``live.py``, "files read at
submission"), where a bad table must be refused over Control without the daemon going down.

A case fails if the product raises anything but its own ``DataError`` / ``ConfigError``, if that
error does not name the file or the table, if a file that is not UTF-8 is read as if it were,
or if PSI's intersection of valid IDs differs from the set intersection.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import structlog.testing
from hypothesis import strategies as st

from vflcore.errors import ConfigError, DataError
from vflcore.party_privacy import party_privacy_keys
from vflcore.psi.blinding import BlindingKey, blind, hash_and_blind
from vflcore.psi.hash_to_curve import make_dst
from vflcore.psi.matching import match, truncate
from vflcore.runtime.config import ClientSettings, client_config_from
from vflcore.settings import table_keys
from vfltesting.fuzz import surfaces
from vfltesting.fuzz.report import Target, Verdict


class OfflineTargets:
    """The in-process targets, with a scratch folder for the files they write."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="vfl-fuzz-offline-")
        self.root = Path(self._folder.name)

    def close(self) -> None:
        self._folder.cleanup()

    def targets(self) -> list[Target]:
        party: dict[str, dict[str, Any]] = {
            "client": {"server": "127.0.0.1:1", "party": 2},
            "data": {"path": "party2.csv"},
            "privacy": {"min_embedding_noise_multiplier": 0.5},
        }
        return [
            Target("party tables, read by the reader", "files", surfaces.table_files(), self._read),
            Target("IDs of any script and length, through PSI", "ids", _id_sets(), _psi),
            Target(
                "a party's [privacy] and [client], read from its config",
                "party config",
                surfaces.party_config_mutants(
                    party, party_privacy_keys(), (*table_keys(ClientSettings, "client"), "party")
                ),
                self._party_config,
            ),
        ]

    def _read(self, case: tuple[str, bytes]) -> Verdict:
        from vflcore.data.tables import read_party_csv

        suffix, data = case
        path = self.root / f"party1{suffix}"
        path.write_bytes(data)
        try:
            with structlog.testing.capture_logs():  # its warnings (repeated IDs) are the reader's to give, not ours
                table = read_party_csv(path, id_column="id", label_column="label")
        except (DataError, ConfigError) as exc:
            if path.name not in str(exc):
                return Verdict(type(exc).__name__, f"the error does not name the file: {exc}")
            return Verdict(type(exc).__name__)
        except Exception as exc:
            return Verdict(type(exc).__name__, f"{type(exc).__name__}: {exc}")
        if suffix == ".csv" and not _is_utf8(data):
            return Verdict("read", f"read {table.num_rows} rows from a file that is not UTF-8")
        return Verdict("read")

    def _party_config(self, document: dict[str, Any]) -> Verdict:
        try:
            client_config_from(document, self.root / "party2.toml")
        except ConfigError as exc:
            if "[" not in str(exc):
                return Verdict("ConfigError", f"the error names no table: {exc}")
            return Verdict("ConfigError")
        except Exception as exc:
            return Verdict(type(exc).__name__, f"{type(exc).__name__}: {exc}")
        return Verdict("read")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _id_sets() -> st.SearchStrategy[tuple[list[str], list[str]]]:
    """Two parties' distinct valid IDs, sharing some."""
    ids = surfaces.id_strings(valid_only=True)
    return st.tuples(
        st.lists(ids, unique=True, max_size=12), st.lists(ids, unique=True, max_size=12), st.lists(ids, max_size=4)
    ).map(lambda t: (list(dict.fromkeys(t[0] + t[2])), list(dict.fromkeys(t[1] + t[2]))))


def _psi(case: tuple[list[str], list[str]]) -> Verdict:
    """PSI's two blindings and its matching on the UTF-8 bytes of the IDs: the intersection, no more, no less."""
    left, right = case
    a, b = BlindingKey.generate(), BlindingKey.generate()
    dst = make_dst("fuzz-ids")
    try:
        ab = blind(hash_and_blind([i.encode() for i in left], dst, a), b)
        ba = blind(hash_and_blind([i.encode() for i in right], dst, b), a)
        i, _ = match(_points(ab), _points(ba))
    except Exception as exc:
        return Verdict(type(exc).__name__, f"{type(exc).__name__}: {exc}")
    found, expected = {left[k] for k in i.tolist()}, set(left) & set(right)
    if found != expected:
        return Verdict("wrong", f"PSI found {len(found)} common IDs, the sets share {len(expected)}")
    return Verdict("intersected")


def _points(values: list[bytes]) -> np.ndarray:
    return truncate(np.frombuffer(b"".join(values), np.uint8).reshape(-1, 32))
