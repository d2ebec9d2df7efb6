"""One exception tree: every error the product defines lives in ``vflcore.errors`` under ``VflError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import grpc
import pytest

import vflclient
from vflcore import errors, status

PACKAGES = ("vflcore", "vflalgorithms", "vflserver", "vflclient")


def _modules() -> list[ModuleType]:
    """Every module of the product packages, imported."""
    found: list[ModuleType] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            found.append(importlib.import_module(info.name))
    return found


def _defined_exceptions() -> dict[str, list[type[BaseException]]]:
    """Exception classes by the module that defines them (not the ones that merely import them)."""
    by_module: dict[str, list[type[BaseException]]] = {}
    for module in _modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                by_module.setdefault(module.__name__, []).append(obj)
    return by_module


DEFINED = _defined_exceptions()


class TestOneTree:
    def test_only_vflcore_errors_defines_exceptions(self) -> None:
        """No product module but ``vflcore.errors`` defines an exception class."""
        assert set(DEFINED) == {"vflcore.errors"}, {m: [c.__name__ for c in cs] for m, cs in DEFINED.items()}

    @pytest.mark.parametrize("kind", DEFINED.get("vflcore.errors", []), ids=lambda kind: kind.__name__)
    def test_every_error_is_a_vfl_error(self, kind: type[BaseException]) -> None:
        """Each class in ``vflcore.errors`` is ``VflError`` or one of its subclasses."""
        assert issubclass(kind, errors.VflError)

    def test_every_error_is_drawn_in_the_docstring(self) -> None:
        """The tree in the module docstring names every class the module defines."""
        assert errors.__doc__ is not None
        drawn = set(re.findall(r"[├└]── (\w+)", errors.__doc__))
        assert drawn | {"VflError"} == {kind.__name__ for kind in DEFINED["vflcore.errors"]}


class TestSdkErrors:
    def test_every_exported_exception_is_a_vfl_error(self) -> None:
        """Each exception class in ``vflclient.__all__`` is a ``VflError``."""
        exported = [getattr(vflclient, name) for name in vflclient.__all__]
        kinds = [obj for obj in exported if inspect.isclass(obj) and issubclass(obj, BaseException)]
        assert kinds, "vflclient exports no exception class"
        assert [kind for kind in kinds if not issubclass(kind, errors.VflError)] == []

    def test_one_class_per_name(self) -> None:
        """The server's and the SDK's ModelNotFound and PartyUnavailable are the same classes."""
        from vflserver.inference import servable

        assert vflclient.ModelNotFound is servable.ModelNotFound is errors.ModelNotFound
        assert servable.PartyUnavailable is errors.PartyUnavailable

    def test_party_unavailable_takes_both_call_styles(self) -> None:
        """``PartyUnavailable(party, reason)`` composes the message; ``PartyUnavailable(message)`` keeps it."""
        composed = errors.PartyUnavailable(3, "timed out")
        assert (str(composed), composed.party, composed.reason) == ("party 3 is unavailable: timed out", 3, "timed out")
        given = errors.PartyUnavailable("party 2 is not connected")
        assert (str(given), given.party) == ("party 2 is not connected", None)


def _drawn_statuses() -> dict[str, str]:
    """Each class drawn in ``vflcore.errors``' tree, with its last column (the status it becomes)."""
    assert errors.__doc__ is not None
    found = {}
    for line in errors.__doc__.splitlines():
        match = re.match(r"\s+(?:[│ ]*[├└]── )?(\w+)\s{2,}.*?\s{2,}(\S.*)$", line)
        if match and hasattr(errors, match.group(1)):
            found[match.group(1)] = match.group(2)
    return found


class TestOneStatusTable:
    """``vflcore.status.STATUS`` is the one table; the tree in ``vflcore.errors`` draws the same column."""

    @pytest.mark.parametrize("kind", DEFINED.get("vflcore.errors", []), ids=lambda kind: kind.__name__)
    def test_the_drawn_status_is_the_tables(self, kind: type[BaseException]) -> None:
        """A class the table maps (itself or an ancestor) is drawn with that status and its HTTP number, if any."""
        drawn = _drawn_statuses()[kind.__name__]
        code = next((status.STATUS[k] for k in kind.__mro__ if k in status.STATUS), None)
        if kind in (errors.ServerUnavailable, errors.TensorRejected):
            return  # the SDK's own: the column lists the statuses the SDK turns into it
        if code is None:
            assert drawn in {"local", "fails the job", "INTERNAL"}, drawn
            return
        assert code.name in drawn.split(", "), (kind.__name__, drawn)
        numbers = [int(part) for part in drawn.split(", ") if part.isdigit()]
        assert all(status.http_status(code) == number for number in numbers), (kind.__name__, drawn)

    def test_the_most_specific_class_wins(self) -> None:
        """A subclass takes its nearest mapped ancestor's status; an unmapped error has none (INTERNAL)."""
        assert status.status_for(errors.EmptyIntersection("none shared")) == grpc.StatusCode.ABORTED
        assert status.status_for(errors.PartyLost(2, "gone")) == grpc.StatusCode.UNAVAILABLE
        assert status.status_for(errors.TensorError("shape", "wrong")) == grpc.StatusCode.INVALID_ARGUMENT
        assert status.status_for(TimeoutError("no upload")) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert status.status_for(KeyError("secret")) is None
        assert status.status_for(errors.DataError("bad table")) is None

    def test_every_server_surface_reads_the_one_table(self) -> None:
        """No server module keeps a status table of its own: each imports ``vflcore.status``."""
        from vflserver.federation import servicer
        from vflserver.inference import grpc_endpoint, handler, rest
        from vflserver.jobs import control

        for module in (servicer, control, handler):
            assert module.status_for is status.status_for, module.__name__
        assert rest.http_status is status.http_status
        for module in (servicer, control, handler, grpc_endpoint, rest):
            assert not hasattr(module, "_STATUS"), module.__name__
