"""``[compute] engine`` and ``ray_address``: read in both daemons' configs, refused by name when wrong.

Whether a Ray cluster answers is the Ray tests' business (``tests/integration/inference/test_ray_engine.py``);
here only the config: the defaults, the values, and the errors that name the file and the key.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from vflclient.cli import main as client_main
from vflcore.errors import ConfigError
from vflcore.psi.blinding import BlindingKey, SerialBlinder
from vflcore.psi.ray_blinding import RayBlinder, blinder_on
from vflcore.runtime import compute
from vflcore.runtime.compute import LOCAL, ComputeEngine
from vflcore.runtime.config import client_config_from, compute_engine, server_config_from
from vflserver.scoring.cli import main as score_main

# The command-line tests set up logging on pytest's captured stderr; put it back (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("restore_logging")

DATA = {"data": {"path": "p.csv"}}


def server(compute_table: dict[str, Any], tmp_path: Path) -> ComputeEngine:
    return server_config_from({**DATA, "compute": compute_table}, tmp_path / "server.toml").settings.compute_engine


def client(compute_table: dict[str, Any], tmp_path: Path) -> ComputeEngine:
    return client_config_from(
        {**DATA, "compute": compute_table}, tmp_path / "client.toml", party=2
    ).settings.compute_engine


READERS = [server, client]


@pytest.mark.parametrize("read", READERS, ids=["server", "client"])
class TestComputeEngine:
    def test_local_is_the_default(self, read: Any, tmp_path: Path) -> None:
        """A config without [compute] engine runs PSI in the daemon's own process pool."""
        assert read({}, tmp_path) == LOCAL
        assert read({"device": "cpu"}, tmp_path) == LOCAL

    def test_ray_and_its_address_are_read(self, read: Any, tmp_path: Path) -> None:
        """engine = "ray" with an address gives the engine PSI is handed; no address leaves Ray's own rule."""
        assert read({"engine": "ray", "ray_address": "ray://head:10001"}, tmp_path) == ComputeEngine(
            "ray", "ray://head:10001"
        )
        assert read({"engine": "ray"}, tmp_path) == ComputeEngine("ray", None)

    @pytest.mark.parametrize(
        ("table", "message"),
        [
            ({"engine": "spark"}, r'\[compute\] engine = \'spark\'; give "local" or "ray"'),
            ({"engine": 1}, r"\[compute\] engine = 1; give \"local\" or \"ray\""),
            ({"engine": "ray", "ray_address": ""}, r"\[compute\] ray_address = \"\"; give the cluster's address"),
            ({"ray_address": "head:6379"}, r'\[compute\] ray_address is set but engine is not "ray"'),
            ({"engines": "ray"}, r"\[compute\] has no key 'engines'; the keys are \['device', 'engine', 'ray_"),
        ],
    )
    def test_a_wrong_value_names_the_file_and_key(
        self, read: Any, tmp_path: Path, table: dict[str, Any], message: str
    ) -> None:
        """Each wrong [compute] value is a ConfigError naming the config file and the key."""
        with pytest.raises(ConfigError, match=message) as caught:
            read(table, tmp_path)
        assert str(tmp_path) in str(caught.value)

    def test_ray_missing_says_how_to_install_it(
        self, read: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """On a host without Ray, engine = "ray" is refused with the pip command for the extra."""
        monkeypatch.setattr(compute, "ray_installed", lambda: False)
        with pytest.raises(ConfigError, match=r"Ray is not installed here: pip install 'vfl-service\[ray\]'"):
            read({"engine": "ray"}, tmp_path)


class TestBlinderChoice:
    def test_the_local_engine_keeps_the_local_blinders(self) -> None:
        """With the local engine, PSI gets what it got before: the serial path for a small set."""
        assert isinstance(blinder_on(LOCAL, 10, BlindingKey.generate()), SerialBlinder)

    def test_the_ray_engine_gets_a_ray_blinder_whatever_the_size(self) -> None:
        """On Ray every set goes to the cluster; nothing connects until the blinder is opened."""
        blinder = blinder_on(ComputeEngine("ray", "head:6379"), 10, BlindingKey.generate())
        assert isinstance(blinder, RayBlinder)
        assert "closed" in repr(blinder) and "head:6379" in repr(blinder)

    def test_a_closed_ray_blinder_refuses_work(self) -> None:
        """Blinding before the context manager opened it is a clear RuntimeError, not a Ray error."""
        blinder = RayBlinder(BlindingKey.generate(), ComputeEngine("ray"))
        with pytest.raises(RuntimeError, match="not open"):
            blinder.blind_packed([b"\x09" + bytes(31)])


def test_the_engine_is_a_known_one() -> None:
    """ComputeEngine itself refuses an unknown engine (the SDK builds it without a config file)."""
    with pytest.raises(ConfigError, match="compute engine 'dask'"):
        ComputeEngine("dask")


def test_compute_engine_reads_a_document_without_a_file() -> None:
    """vfl-score reads [compute] from flags alone when no --config is given."""
    assert compute_engine({"compute": {"engine": "ray", "ray_address": "auto"}}, None) == ComputeEngine("ray", "auto")


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class TestNoClusterThere:
    """An explicit ray_address where nothing listens fails in a second, naming it, not after minutes of retries."""

    @pytest.fixture(autouse=True)
    def _needs_ray(self) -> None:
        pytest.importorskip("ray", reason="needs the extra: pip install 'vfl-service[ray]'")

    def test_connect_names_the_address(self) -> None:
        """connect raises ConnectionError naming the address, for host:port and ray:// forms."""
        for address in (f"127.0.0.1:{closed_port()}", f"ray://127.0.0.1:{closed_port()}"):
            with pytest.raises(ConnectionError, match=f"nothing answers at ray_address {address}"):
                compute.connect(ComputeEngine("ray", address))

    def test_the_client_daemon_exits_3(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """vfl-client with engine = "ray" and no cluster stops at start with exit code 3."""
        config = tmp_path / "party2.toml"
        config.write_text(
            f'[data]\npath = "p.csv"\n[compute]\nengine = "ray"\nray_address = "127.0.0.1:{closed_port()}"\n'
        )
        assert client_main(["--config", str(config), "--party", "2", "--insecure"]) == 3
        assert "nothing answers at ray_address" in capsys.readouterr().err

    def test_vfl_score_exits_3(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """vfl-score --engine ray with no cluster exits 3 before it reads any model or row."""
        address = f"127.0.0.1:{closed_port()}"
        args = ["--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path), "--output", str(tmp_path / "o")]
        assert score_main([*args, "--engine", "ray", "--ray-address", address]) == 3
        assert f"nothing answers at ray_address {address}" in capsys.readouterr().err
