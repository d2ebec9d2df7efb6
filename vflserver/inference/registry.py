"""The models an inference endpoint serves, by name; safe to change while requests are in flight.

Training finishes while the endpoints are already up, so models are added or replaced at run
time. Writers take a lock and swap in a new dict; readers (every request) only read the current
dict, which is one atomic attribute load, so the hot path takes no lock. Each entry caches its
input and output specs by name, because ``Servable.inputs`` may build a new list on every call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from vflcore.errors import ModelNotFound
from vflserver.inference.servable import Servable, TensorSpec


@dataclass(frozen=True)
class ServedModel:
    """A servable with its specs looked up once, when it was added."""

    servable: Servable
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]

    @classmethod
    def of(cls, servable: Servable) -> ServedModel:
        return cls(
            servable,
            {spec.name: spec for spec in servable.inputs},
            {spec.name: spec for spec in servable.outputs},
        )


class ModelRegistry:
    """Name → model. ``add`` replaces a model of the same name; lookups never block."""

    def __init__(self, *servables: Servable) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, ServedModel] = {}
        for servable in servables:
            self.add(servable)

    def add(self, servable: Servable) -> None:
        """Serve ``servable`` under its name, replacing any model of that name."""
        entry = ServedModel.of(servable)
        with self._lock:
            self._models = {**self._models, servable.name: entry}

    def remove(self, name: str) -> None:
        """Stop serving ``name``; ModelNotFound if it is not served."""
        with self._lock:
            if name not in self._models:
                raise ModelNotFound(f"model {name!r} is not served")
            self._models = {key: value for key, value in self._models.items() if key != name}

    def get(self, name: str, version: str = "") -> ServedModel:
        """The model ``name``; an empty ``version`` matches any, otherwise it must be the model's."""
        models = self._models
        entry = models.get(name)
        if entry is None:
            served = sorted(models) or "none"
            raise ModelNotFound(f"unknown model {name!r}; served models: {served}")
        if version and version != entry.servable.version:
            raise ModelNotFound(f"model {name!r} has no version {version!r}; it serves {entry.servable.version!r}")
        return entry

    def models(self) -> list[ServedModel]:
        """Every model served right now."""
        return list(self._models.values())
