"""``vfl-server`` through its runner: configuration and address problems give documented exit codes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from vflserver.cli import main
from vfltesting.pki import Pki

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("restore_logging")]


def _args(pki: Pki, digits_data: Path, tmp_path: Path, listen: str) -> list[str]:
    files = pki.server_files()
    return ["--listen", listen, "--data", str(digits_data / "party1.csv"), "--ca", str(files.ca)] + [
        "--cert",
        str(files.cert),
        "--key",
        str(files.key),
        "--run-dir",
        str(tmp_path / "runs"),
    ]


class TestServerCli:
    def test_busy_port_exits_3_with_a_sentence(
        self, pki: Pki, digits_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Listening on a port another process holds exits 3 and says the address is in use."""
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            code = main(_args(pki, digits_data, tmp_path, f"127.0.0.1:{port}"))
        assert code == 3
        assert "in use" in capsys.readouterr().err

    def test_missing_data_file_exits_2_naming_it(
        self, pki: Pki, digits_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A data path that does not exist exits 2 and names the file."""
        args = _args(pki, digits_data, tmp_path, "127.0.0.1:0")
        args[args.index("--data") + 1] = str(tmp_path / "nope.csv")
        assert main(args) == 2
        assert "nope.csv" in capsys.readouterr().err

    def test_missing_key_file_exits_2_naming_it(
        self, pki: Pki, digits_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A missing server key exits 2, names the file and says how to make one."""
        args = _args(pki, digits_data, tmp_path, "127.0.0.1:0")
        args[args.index("--key") + 1] = str(tmp_path / "server.key")
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "server.key" in err and "vfl-certs" in err

    @pytest.mark.parametrize(
        ("text", "words"),
        [
            # Job tables with no [job] are refused at start, not silently ignored.
            ("[model]\ntop_hidden = [32]\n", ("[model]", "server.toml", "[job]")),
            ("[distill]\nepochs = 5\n", ("[distill]", "server.toml", "[job]")),
            # The config's own job is checked at start as a submitted one is: [distill] too.
            ('[job]\nalgorithm = "splitnn"\n\n[distill]\nlabel_weight = 2\n', ("[distill] label_weight = 2",)),
            # <job>-student is where job <job>'s student is served: no job may take that name.
            ('[job]\njob_id = "credit-student"\n', ("the config's [job]: [job] job_id = 'credit-student'",)),
        ],
    )
    def test_a_bad_config_job_exits_2_naming_the_table_or_key(
        self,
        text: str,
        words: tuple[str, ...],
        pki: Pki,
        digits_data: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        config = tmp_path / "server.toml"
        config.write_text(text)
        args = ["--config", str(config), *_args(pki, digits_data, tmp_path, "127.0.0.1:0")]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert all(word in err for word in words), err
