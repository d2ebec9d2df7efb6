"""``vfl-certs bundle``: one archive per host, with that host's key only, a config that loads, the unit and a README.

The certificates are made by the project's own ``vfl-certs init`` (and ``operator``, ``caller``);
each archive is then opened as its recipient would: its members, their modes, and the config
read by the product's own config loader once unpacked where ``--prefix`` says.
"""

from __future__ import annotations

import tarfile
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from vflcore.runtime.config import client_config_from, load_toml, server_config_from
from vflcore.security import certs_cli

ADDRESS = "vfl.bank.example:50051"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    assert certs_cli.main(["init", "--out", str(out), "--parties", "2", "3", "--dns", "vfl.bank.example"]) == 0
    assert certs_cli.main(["operator", "alice", "--out", str(out)]) == 0
    assert certs_cli.main(["caller", "scoring-app", "--out", str(out)]) == 0
    return out


def _bundle(certs: Path, to: Path, *who: str, prefix: Path | None = None) -> tarfile.TarFile:
    argv = ["bundle", *who, "--out", str(certs), "--to", str(to)]
    if prefix is not None:
        argv += ["--prefix", str(prefix)]
    assert certs_cli.main(argv) == 0
    [archive] = list(to.glob("*.tar.gz"))
    assert archive.stat().st_mode & 0o777 == 0o600
    return tarfile.open(archive)


def _unit_settings_of(text: str) -> dict[str, str]:
    """A systemd unit's ``Key=value`` lines (comments left out)."""
    lines = [line.partition("=") for line in text.splitlines() if "=" in line and not line.startswith("#")]
    return {key: value for key, _, value in lines}


def _unit_settings(path: Path) -> dict[str, str]:
    return _unit_settings_of(path.read_text())


def _members(archive: tarfile.TarFile) -> dict[str, int]:
    return {m.name: m.mode for m in archive.getmembers()}


class TestPartyArchive:
    def test_it_holds_this_partys_key_and_nothing_of_anyone_else(self, certs: Path, tmp_path: Path) -> None:
        archive = _bundle(certs, tmp_path, "--party", "2", "--server-address", ADDRESS)
        assert _members(archive) == {
            "vfl-party-2/certs/ca.pem": 0o644,
            "vfl-party-2/certs/party-2.pem": 0o644,
            "vfl-party-2/certs/party-2.key": 0o600,
            "vfl-party-2/party2.toml": 0o644,
            "vfl-party-2/vfl-client@.service": 0o644,
            "vfl-party-2/README.txt": 0o644,
        }
        key = archive.extractfile("vfl-party-2/certs/party-2.key")
        assert key is not None and key.read() == (certs / "party-2.key").read_bytes()
        every_byte = b"".join(f.read() for m in archive.getmembers() if (f := archive.extractfile(m)) is not None)
        for other in ("ca.key", "party-3.key", "server.key", "alice.key", "scoring-app.key"):
            assert (certs / other).read_bytes() not in every_byte, other
        unit = resources.files("vflcore.deploy").joinpath("vfl-client@.service").read_bytes()
        service = archive.extractfile("vfl-party-2/vfl-client@.service")
        assert service is not None and service.read() == unit

    def test_unpacked_under_its_prefix_the_config_loads_and_dials_the_server(self, certs: Path, tmp_path: Path) -> None:
        """--prefix is where the files will be: the config's certificate paths then exist as written."""
        home = tmp_path / "etc"
        archive = _bundle(
            certs, tmp_path / "out", "--party", "3", "--server-address", ADDRESS, prefix=home / "vfl-party-3"
        )
        archive.extractall(home, filter="data")
        config_path = home / "vfl-party-3" / "party3.toml"
        config = client_config_from(load_toml(config_path), config_path)
        assert config.settings.server == ADDRESS and config.party == 3
        assert config.tls is not None and config.tls.key.is_file() and config.tls.cert.is_file()
        assert (config.tls.key.stat().st_mode & 0o777) == 0o600
        readme = (home / "vfl-party-3" / "README.txt").read_text()
        assert "systemctl enable --now vfl-client@3" in readme and ADDRESS in readme

    def test_its_unit_and_run_dir_follow_the_prefix(self, certs: Path, tmp_path: Path) -> None:
        """--prefix moves the unit's --config and, without --run-dir, the run directory to <prefix>/runs."""
        prefix = tmp_path / "etc" / "vfl-party-3"  # holds "/etc/vfl" itself: moved once, not twice
        archive = _bundle(certs, tmp_path / "out", "--party", "3", "--server-address", ADDRESS, prefix=prefix)
        archive.extractall(tmp_path / "etc", filter="data")
        unit = _unit_settings(prefix / "vfl-client@.service")
        assert f"--config {prefix}/party%i.toml " in unit["ExecStart"], unit
        assert unit["WorkingDirectory"] == unit["ReadWritePaths"] == str(prefix / "runs"), unit
        config_path = prefix / "party3.toml"
        config = client_config_from(load_toml(config_path), config_path)
        assert config.settings.run_dir == prefix / "runs"
        assert f"install -d -o vfl -g vfl {prefix / 'runs'}" in (prefix / "README.txt").read_text()

    def test_run_dir_puts_the_runs_where_it_says(self, certs: Path, tmp_path: Path) -> None:
        """--run-dir sets the config's run_dir and the folder the unit starts in and may write."""
        archive = _bundle(certs, tmp_path, "--server", "--run-dir", "/srv/vfl/runs")
        member = archive.extractfile("vfl-server/vfl-server.service")
        assert member is not None
        unit = _unit_settings_of(member.read().decode())
        assert "--config /etc/vfl/server.toml " in unit["ExecStart"], unit
        assert unit["WorkingDirectory"] == unit["ReadWritePaths"] == "/srv/vfl/runs", unit
        config = archive.extractfile("vfl-server/server.toml")
        assert config is not None and tomllib.loads(config.read().decode())["server"]["run_dir"] == "/srv/vfl/runs"

    def test_its_readme_installs_from_the_wheelhouse_offline(self, certs: Path, tmp_path: Path) -> None:
        """Step 1 installs the wheel, CPU torch and every dependency from `make wheelhouse`, with no index."""
        archive = _bundle(certs, tmp_path, "--party", "2", "--server-address", ADDRESS)
        readme = archive.extractfile("vfl-party-2/README.txt")
        assert readme is not None
        assert "pip install --no-index --find-links wheelhouse vfl-service" in readme.read().decode()


class TestOtherHosts:
    def test_the_server_archive_listens_everywhere_and_loads(self, certs: Path, tmp_path: Path) -> None:
        home = tmp_path / "etc"
        archive = _bundle(certs, tmp_path / "out", "--server", prefix=home / "vfl-server")
        names = _members(archive)
        assert names["vfl-server/certs/server.key"] == 0o600 and "vfl-server/vfl-server.service" in names
        assert not [n for n in names if n.endswith(".key") and not n.endswith("server.key")]
        archive.extractall(home, filter="data")
        document = tomllib.loads((home / "vfl-server" / "server.toml").read_text())
        assert document["server"]["listen"] == "0.0.0.0:50051" and document["console"]["enabled"] is False
        data = tmp_path / "party1.csv"
        data.write_text("id,label\nu1,0\n")
        document["datasets"]["default"]["path"] = str(data)  # the owner fills the placeholder in
        config = server_config_from(document, home / "vfl-server" / "server.toml")
        assert config.tls is not None and config.tls.key.is_file()

    @pytest.mark.parametrize(("who", "name"), [("--operator", "alice"), ("--caller", "scoring-app")])
    def test_an_operator_or_caller_gets_its_own_pair_and_the_commands(
        self, who: str, name: str, certs: Path, tmp_path: Path
    ) -> None:
        flag = "--server-address" if who == "--operator" else "--endpoint"
        archive = _bundle(certs, tmp_path, who, name, flag, ADDRESS)
        names = _members(archive)
        assert [n for n in names if n.endswith(".key")] == [f"vfl-{who[2:]}-{name}/certs/{name}.key"]
        readme = archive.extractfile(f"vfl-{who[2:]}-{name}/README.txt")
        assert readme is not None and ADDRESS in readme.read().decode()


class TestRefusals:
    def test_a_certificate_not_issued_is_named_with_the_command(
        self, certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        argv = ["bundle", "--party", "4", "--server-address", ADDRESS, "--out", str(certs), "--to", str(tmp_path)]
        assert certs_cli.main(argv) == 2
        assert "party-4.pem does not exist; issue it first with: vfl-certs party 4" in capsys.readouterr().err
        assert not list(tmp_path.glob("*.tar.gz"))

    def test_a_party_archive_needs_the_servers_address(
        self, certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert certs_cli.main(["bundle", "--party", "2", "--out", str(certs), "--to", str(tmp_path)]) == 2
        assert "--server-address HOST:PORT is needed with --party" in capsys.readouterr().err
