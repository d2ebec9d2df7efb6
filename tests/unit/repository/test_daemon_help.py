"""``--help`` of the daemons (and of vfl-score) describes what they run and names files that exist.

An operator's first look at a daemon is its ``--help``. It must describe what runs for months (a
service that takes job after job), not the one-shot job it can also be, and point at a config
file for that service which is really in the repository.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from vflclient import cli as client_cli
from vflserver import cli as server_cli
from vflserver.scoring import cli as score_cli
from vfltesting.paths import REPO_ROOT as ROOT

Main = Callable[[list[str] | None], int]


def _help(main: Main, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    # argparse wraps lines to the terminal; join them so a phrase split by a line break is found
    return " ".join(capsys.readouterr().out.split())


def _example_configs(text: str) -> list[str]:
    return re.findall(r"examples/configs/[\w.-]+\.toml", text)


class TestDaemonHelp:
    def test_server_describes_the_daemon_and_points_to_the_service_config(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """vfl-server --help says it is the active party's daemon and names examples/configs/service.toml."""
        text = _help(server_cli.main, capsys)
        assert "Active party (label holder) of a VFL job" not in text
        assert "daemon" in text and "until SIGINT or SIGTERM" in text
        assert "--config examples/configs/service.toml" in text

    def test_client_describes_the_daemon_and_points_to_its_config(self, capsys: pytest.CaptureFixture[str]) -> None:
        """vfl-client --help says it is a passive party's daemon and shows how to start it with a party config."""
        text = _help(client_cli.main, capsys)
        assert "Passive party (feature holder) of a VFL job" not in text
        assert "daemon" in text and "every job that names its party" in text
        assert "vfl-client --party 2 --config examples/configs/party2.toml" in text

    @pytest.mark.parametrize("main", [server_cli.main, client_cli.main], ids=["vfl-server", "vfl-client"])
    def test_every_config_named_exists(self, main: Main, capsys: pytest.CaptureFixture[str]) -> None:
        """Each examples/configs/*.toml that --help names is a file in the repository."""
        named = _example_configs(_help(main, capsys))
        assert named
        assert [name for name in named if not (ROOT / name).is_file()] == []


def test_vfl_score_names_both_models_it_scores(capsys: pytest.CaptureFixture[str]) -> None:
    """vfl-score --help names an APFed model and a [distill] job's student, not "a standalone (APFed) model" only."""
    text = _help(score_cli.main, capsys)
    assert "standalone (APFed) model" not in text
    assert "APFed" in text and "student" in text and "party-1/student/model.onnx" in text
