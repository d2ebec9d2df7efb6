"""One exception tree: every error the product defines lives in ``vflcore.errors`` under ``VflError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import vflclient
from vflcore import errors

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
