"""Config files: defaults, paths relative to the file, flags on top, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vflcore.errors import ConfigError
from vflcore.runtime.config import ClientConfig, ServerConfig, client_config_from, load_toml, server_config_from

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
            ({"weight_decay": -0.1}, r"\[job\] weight_decay must be zero or a positive number"),
            ({"weight_decay": float("nan")}, "weight_decay"),
        ],
    )
    def test_bad_job_settings_are_refused(self, tmp_path: Path, job: dict[str, object], message: str) -> None:
        """Each impossible [job] setting is a ConfigError naming it."""
        doc = {"data": {"path": "p.csv"}, "job": job}
        with pytest.raises(ConfigError, match=message):
            server_config_from(doc, tmp_path / "server.toml")

    def test_regularisers_are_read(self, tmp_path: Path) -> None:
        """[job] weight_decay reaches the job every party gets; [model] top_dropout stays with the server."""
        doc = {"data": {"path": "p.csv"}, "job": {"weight_decay": 1e-4}, "model": {"top_dropout": 0.5}}
        config = server_config_from(doc, tmp_path / "server.toml")
        assert config.job.weight_decay == 1e-4 and config.top_dropout == 0.5
        defaults = server_config_from({"data": {"path": "p.csv"}}, tmp_path / "server.toml")
        assert defaults.job.weight_decay == 0.0 and defaults.top_dropout == 0.0

    @pytest.mark.parametrize("rate", [1.0, -0.2])
    def test_top_dropout_out_of_range_is_refused(self, tmp_path: Path, rate: float) -> None:
        """A dropout rate outside [0, 1) names the key and the range."""
        doc = {"data": {"path": "p.csv"}, "model": {"top_dropout": rate}}
        with pytest.raises(ConfigError, match=r"\[model\] top_dropout = .*in \[0, 1\)"):
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


class TestKeepCheckpoints:
    @pytest.mark.parametrize("section", ["server", "client"])
    def test_default_is_two_and_a_value_is_read(self, tmp_path: Path, section: str) -> None:
        """Left out, ``keep_checkpoints`` is 2; set, its value reaches the config."""
        assert _config(section, {}, tmp_path).keep_checkpoints == 2
        assert _config(section, {"keep_checkpoints": 5}, tmp_path).keep_checkpoints == 5

    @pytest.mark.parametrize("section", ["server", "client"])
    @pytest.mark.parametrize("value", [0, -3, 1.5, "2", True])
    def test_anything_but_a_whole_number_from_one_is_refused(self, tmp_path: Path, section: str, value: object) -> None:
        """Zero, a negative, a fraction, a string or a boolean is a ConfigError naming the table and key."""
        with pytest.raises(ConfigError, match=rf"\[{section}\] keep_checkpoints = .*at least 1"):
            _config(section, {"keep_checkpoints": value}, tmp_path)


def _config(section: str, keys: dict[str, Any], tmp_path: Path) -> ServerConfig | ClientConfig:
    """The ``[server]`` or ``[client]`` table ``keys`` read as that daemon's config."""
    if section == "server":
        return server_config_from({"data": {"path": "x.csv"}, "server": keys}, tmp_path / "server.toml")
    return client_config_from({"data": {"path": "x.csv"}, "client": {"party": 2, **keys}}, tmp_path / "party2.toml")


@pytest.mark.parametrize("job_id", ["test-job", "job-20261124-081530-ab12cd", "digits_v1.2", "x" * 128])
def test_plain_job_ids_are_accepted(job_id: str) -> None:
    assert server_config_from({"data": {"path": "p.csv"}, "job": {"job_id": job_id}}).job.job_id == job_id


@pytest.mark.parametrize("job_id", ["../x", "a/b", "a\\b", ".hidden", "-flag", "with space", "x" * 129, "tab\t"])
def test_a_job_id_that_is_not_a_plain_name_is_refused(job_id: str) -> None:
    """A job id names a folder on every party and the served model: nothing a path or URL reads differently."""
    with pytest.raises(ConfigError, match=r"\[job\] job_id: job id .* is not allowed"):
        server_config_from({"data": {"path": "p.csv"}, "job": {"job_id": job_id}})
