"""Tests for vflcore.runtime.logs: JSON or console output, bound context, and terminal-only progress bars."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from vflcore.runtime.logs import LIBRARY_LEVEL_ENV, configure_logging, get_logger, progress

# Every test leaves structlog, stdlib logging and context variables as they were (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("restore_logging")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestConfigureLogging:
    def test_json_lines_when_not_a_terminal(self) -> None:
        """A non-terminal stream gets one JSON object per event with level, UTC time and context."""
        out = io.StringIO()
        configure_logging(stream=out)
        structlog.contextvars.bind_contextvars(party=2, round=7)
        get_logger("vfl.test").info("batch_sent", rows=32)
        event = json.loads(out.getvalue())
        assert event["event"] == "batch_sent" and event["rows"] == 32
        assert event["party"] == 2 and event["round"] == 7
        assert event["level"] == "info" and event["logger"] == "vfl.test"
        assert event["timestamp"].endswith("Z")

    @pytest.mark.parametrize("as_json", [True, False])
    def test_an_exception_is_logged_without_the_frames_locals(self, as_json: bool) -> None:
        """A logged traceback names the error and where it was raised, never a frame's local values (IDs, tensors)."""
        out = io.StringIO()
        configure_logging(json=as_json, stream=out)

        def align(sample_id: str) -> None:
            raise ValueError("no such row")

        sample_id = f"id-{4711 * 3}"  # computed, so the traceback's source lines cannot show it
        try:
            align(sample_id)
        except ValueError:
            get_logger("vfl.test").exception("alignment_failed")
        text = out.getvalue()
        assert "no such row" in text and "align" in text
        assert sample_id not in text

    def test_console_when_a_terminal(self) -> None:
        """A terminal stream gets human-readable lines rather than JSON."""
        out = FakeTerminal()
        configure_logging(stream=out)
        get_logger("vfl.test").info("joined", party=3)
        line = out.getvalue()
        assert "joined" in line and "party" in line
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)

    def test_json_flag_overrides_terminal_detection(self) -> None:
        """json=True writes JSON even to a terminal."""
        out = FakeTerminal()
        configure_logging(json=True, stream=out)
        get_logger("x").warning("slow")
        assert json.loads(out.getvalue())["level"] == "warning"

    def test_level_filters_events(self) -> None:
        """Events below the configured level are dropped."""
        out = io.StringIO()
        configure_logging(level="warning", stream=out)
        get_logger("x").info("quiet")
        get_logger("x").error("loud")
        assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["loud"]

    def test_stdlib_records_rendered_the_same_way(self) -> None:
        """Third-party stdlib logging records come out as JSON with the bound context."""
        out = io.StringIO()
        configure_logging(stream=out)
        structlog.contextvars.bind_contextvars(party=1)
        logging.getLogger("thirdparty").warning("hello %s", "there")
        event = json.loads(out.getvalue())
        assert event["event"] == "hello there" and event["party"] == 1 and event["logger"] == "thirdparty"

    def test_reconfiguring_replaces_our_handler_only(self) -> None:
        """Calling configure twice leaves one handler of ours on the root logger."""
        configure_logging(stream=io.StringIO())
        before = len(logging.getLogger().handlers)
        configure_logging(stream=io.StringIO())
        assert len(logging.getLogger().handlers) == before

    def test_unknown_level(self) -> None:
        """An unknown level name is rejected with the choices."""
        with pytest.raises(ValueError, match="unknown log level 'loud'"):
            configure_logging(level="loud")

    def test_capture_logs_sees_module_loggers(self) -> None:
        """structlog.testing.capture_logs works after configuration, so tests can assert logs as data."""
        logger = get_logger("vfl.test")  # created before configuration, as at module import
        configure_logging(stream=io.StringIO())
        logger.info("before")
        with structlog.testing.capture_logs() as captured:
            logger.info("during", round=1)
        assert captured == [{"event": "during", "round": 1, "log_level": "info"}]


class TestLibraryNoise:
    """At --log-level debug, libraries' debug records stay out unless VFL_LIBRARY_LOG_LEVEL asks for them."""

    def _debug_lines(self) -> list[str]:
        out = io.StringIO()
        configure_logging(level="debug", stream=out)
        get_logger("vflserver.x").debug("ours")
        logging.getLogger("grpc._cython.cygrpc").debug("Loaded running loop")
        logging.getLogger("matplotlib.font_manager").debug("findfont: score(FontEntry(...)) = 10.05")
        own = logging.getLogger("chatty")
        own.setLevel(logging.DEBUG)  # a library that lowers its own logger's level
        own.debug("chatty debug")
        own.setLevel(logging.NOTSET)
        logging.getLogger("grpc").info("a library's info")
        return [json.loads(line)["event"] for line in out.getvalue().splitlines()]

    def test_debug_keeps_ours_and_the_libraries_info_only(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(LIBRARY_LEVEL_ENV, raising=False)
        assert self._debug_lines() == ["ours", "a library's info"]

    def test_the_variable_lets_the_libraries_debug_through(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(LIBRARY_LEVEL_ENV, "debug")
        assert "Loaded running loop" in self._debug_lines()

    def test_it_cannot_let_through_what_the_level_holds_back(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(LIBRARY_LEVEL_ENV, "debug")
        out = io.StringIO()
        configure_logging(level="warning", stream=out)
        logging.getLogger("grpc").info("held back")
        assert out.getvalue() == ""

    def test_a_bad_value_names_the_variable(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(LIBRARY_LEVEL_ENV, "chatty")
        with pytest.raises(ValueError, match="VFL_LIBRARY_LOG_LEVEL='chatty' is not a log level"):
            configure_logging(stream=io.StringIO())


class TestProgress:
    def test_passthrough_without_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without a terminal on stderr the iterable itself is returned."""
        monkeypatch.setattr("sys.stderr", io.StringIO())
        items = [1, 2, 3]
        assert progress(items, total=3, desc="x") is items

    def test_wraps_in_tqdm_on_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With a terminal on stderr the items pass through a tqdm bar."""
        terminal = FakeTerminal()
        monkeypatch.setattr("sys.stderr", terminal)
        wrapped = progress(iter([1, 2, 3]), total=3, desc="epoch")
        assert type(wrapped).__name__ == "tqdm"
        assert list(wrapped) == [1, 2, 3]
        assert "epoch" in terminal.getvalue()
