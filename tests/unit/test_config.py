"""Config files: defaults, paths relative to the file, flags on top, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from vflcore.config import client_config_from, load_toml, server_config_from
from vflcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


class TestServerConfig:
    def test_example_config_loads(self) -> None:
        """The shipped example server.toml is valid and resolves paths against its own folder."""
        path = ROOT / "examples/configs/server.toml"
        config = server_config_from(load_toml(path), path)
        assert config.job.algorithm == "splitnn" and config.job.passive_parties == (2, 3)
        assert config.data.path.resolve() == (ROOT / "examples/data/party1.csv").resolve()
        assert config.tls is not None and config.tls.ca.resolve() == (ROOT / "certs/ca.pem").resolve()

    def test_missing_data_path_names_the_key(self, tmp_path: Path) -> None:
        """Leaving out [data] path says which key is required."""
        with pytest.raises(ConfigError, match=r"\[data\] path is required"):
            server_config_from({}, tmp_path / "server.toml")

    @pytest.mark.parametrize(
        ("job", "message"),
        [
            ({"task": "ranking"}, "task"),
            ({"batch_size": 0}, "batch_size"),
            ({"test_fraction": 1.0}, "test_fraction"),
            ({"passive_parties": [1]}, "passive_parties"),
            ({"passive_parties": [2, 2]}, "twice"),
            ({"epochs": "ten"}, "epochs"),
        ],
    )
    def test_bad_job_settings_are_refused(self, tmp_path: Path, job: dict[str, object], message: str) -> None:
        """Each impossible [job] setting is a ConfigError naming it."""
        doc = {"data": {"path": "p.csv"}, "job": job}
        with pytest.raises(ConfigError, match=message):
            server_config_from(doc, tmp_path / "server.toml")

    def test_invalid_toml_names_the_file(self, tmp_path: Path) -> None:
        """A syntax error mentions the file."""
        bad = tmp_path / "bad.toml"
        bad.write_text("[job\nepochs = 3")
        with pytest.raises(ConfigError, match=r"bad\.toml"):
            load_toml(bad)


class TestClientConfig:
    def test_party_flag_wins_and_picks_default_cert_names(self, tmp_path: Path) -> None:
        """--party overrides the file, and the default certificate is certs/party-N.pem."""
        doc = {"client": {"party": 2}, "data": {"path": "x.csv"}}
        config = client_config_from(doc, tmp_path / "c.toml", party=3)
        assert config.party == 3
        assert config.tls is not None and config.tls.cert.name == "party-3.pem"

    def test_party_one_is_refused(self, tmp_path: Path) -> None:
        """Party 1 is the server; a client claiming it is told so."""
        with pytest.raises(ConfigError, match="party 1 is the server"):
            client_config_from({"data": {"path": "x.csv"}}, tmp_path / "c.toml", party=1)

    def test_missing_party_is_explained(self, tmp_path: Path) -> None:
        """Without --party or [client] party the error says how to give one."""
        with pytest.raises(ConfigError, match="--party N"):
            client_config_from({"data": {"path": "x.csv"}}, tmp_path / "c.toml")
