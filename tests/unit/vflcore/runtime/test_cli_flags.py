"""vflcore.runtime.cli_flags: a flag that overrides a config key is declared with that key; only a given flag wins."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from vflcore.runtime import cli_flags


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    cli_flags.add_config(p, "the config")
    cli_flags.add_config_flag(p, "--listen", ("server", "listen"))
    cli_flags.add_config_flag(p, "--epochs", ("job", "epochs"), type=int)
    cli_flags.add_config_flag(p, "--serve", ("serving", "enabled"), action="store_true")
    cli_flags.add_tls_files(p, ca="ca", cert="cert", key="key")
    p.add_argument("--once", action="store_true")  # no config key: never in the document
    cli_flags.add_insecure(p)
    return p


def test_given_flags_win_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "server.toml"
    config.write_text('[server]\nlisten = "0.0.0.0:1"\nrun_dir = "runs"\n\n[job]\nepochs = 3\n')
    monkeypatch.chdir(tmp_path)
    args = _parser().parse_args(["--config", str(config), "--listen", "127.0.0.1:2", "--ca", "ca.pem", "--once"])
    assert cli_flags.document(args) == {
        "server": {"listen": "127.0.0.1:2", "run_dir": "runs"},
        "job": {"epochs": 3},
        "tls": {"ca": str(tmp_path / "ca.pem")},  # a path on the command line is relative to the working directory
    }


def test_a_switch_not_given_leaves_the_key_alone(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text("[serving]\nenabled = true\n")
    assert cli_flags.document(_parser().parse_args(["--config", str(config)])) == {"serving": {"enabled": True}}
    assert cli_flags.document(_parser().parse_args(["--serve", "--epochs", "0"])) == {
        "serving": {"enabled": True},
        "job": {"epochs": 0},  # 0 is a value, not an absent flag
    }


def test_insecure_on_a_subcommand_keeps_the_value_given_before_it() -> None:
    p = argparse.ArgumentParser()
    cli_flags.add_insecure(p)
    common = argparse.ArgumentParser(add_help=False)
    cli_flags.add_insecure(common, default=argparse.SUPPRESS)
    p.add_subparsers(dest="command").add_parser("list", parents=[common])
    assert p.parse_args(["--insecure", "list"]).insecure is True
    assert p.parse_args(["list", "--insecure"]).insecure is True
    assert p.parse_args(["list"]).insecure is False
