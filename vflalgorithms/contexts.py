"""What each party hands an algorithm's half for one job: its data, its device and its link to the others.

The active party's half gets an ``ActiveContext`` (its own features and labels, and the passive
parties through ``PassivePartiesView``); a passive party's half gets a ``PassiveContext`` (its
features, its model factory and its ``TrainingLink`` to the server). Both say where the party
computes (``[compute] device``) and what to call after each step, where checkpoints are saved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch import nn

from vflcore.job.schedule import Schedule
from vflcore.job.spec import JobSpec
from vflcore.ml.models import build_seeded
from vflcore.wire.links import TrainingLink
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Task

#: Leaves each passive party of a round its answer: named tensors per party, in party order.
Publish = Callable[[list[dict[str, torch.Tensor]]], None]

#: Called by a half after each training step: (epoch, batches of it done, batches per epoch).
#: The party saves a checkpoint there when ``[job] checkpoint_every_steps`` says one is due.
AfterStep = Callable[[int, int, int], None]


def _no_checkpoints(epoch: int, done: int, per_epoch: int) -> None:
    """A half run outside a party (a test, a reference): nothing to save."""


class PassivePartiesView(Protocol):
    """What an algorithm's active half may do with the passive parties (``vflserver.federation.passive_parties``)."""

    def dispatch(self, make_task: Callable[[int], Task], *, parties: Iterable[int] | None = None) -> None: ...

    def expect(
        self,
        name: str,
        round_: int,
        batch: int,
        shape: tuple[int, ...],
        dtype: str = "float32",
        *,
        party: int | None = None,
    ) -> None: ...

    def gather(
        self, name: str, round_: int, batch: int, *, timeout_s: float | None = None
    ) -> dict[int, np.ndarray]: ...

    def next_arrival(
        self, name: str, round_: int, *, timeout_s: float | None = None
    ) -> tuple[int, int, np.ndarray]: ...

    def forget(self, name: str, round_: int, batch: int) -> None: ...

    def publish(self, party: int, key: TensorKey, array: np.ndarray, *, exact: bool = False) -> None: ...


class _OnDevice:
    """What both contexts share: the party's ``[compute] device``, and arrays from the wire moved there."""

    device: torch.device

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """A float32 array from the wire, as a tensor on this party's device (copied: wire buffers are read-only)."""
        return torch.from_numpy(np.array(array, dtype=np.float32)).to(self.device)


@dataclass
class ActiveContext(_OnDevice):
    """The active party's own data and its link to the passive parties, for one job."""

    job: JobSpec
    schedule: Schedule
    parties: PassivePartiesView
    features: torch.Tensor  # aligned rows x own features (may have 0 columns)
    labels: torch.Tensor  # int64 class ids, or float32 (n, 1) targets for regression
    num_outputs: int
    top_hidden: tuple[int, ...]
    #: Dropout after each hidden layer of the active party's MLP top (``[model] top_dropout``).
    top_dropout: float = 0.0
    after_step: AfterStep = _no_checkpoints
    #: The job's own model factories by ``[model]`` key (``vflalgorithms.factories``), already imported.
    factories: Mapping[str, Callable[..., nn.Module]] = field(default_factory=dict)
    #: Where this party computes (``[compute] device``); ``features`` and ``labels`` are there already.
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    #: The active party's secret noise key (``vflprivacy.noise``) when the job's ``[privacy]``
    #: asks it for noise (a label defence, label DP, h^A's noise): drawn from it, never from the job's seed.
    privacy_key: bytes | None = None
    #: This party's job folder, where ``privacy.json`` counts what it releases (APFed's h^A).
    folder: Path | None = None

    def model(self, key: str, default: Callable[..., nn.Module], args: tuple[int, ...], seed: int) -> nn.Module:
        """The model for factory ``key``: the job's own factory if it names one, else ``default``.

        Called with ``args``, built from ``seed`` (``build_seeded``) and moved to ``device``. A
        factory equivalent to the default (same layers, same widths) draws the same weights.
        """
        factory = self.factories.get(key, default)
        return build_seeded(lambda: factory(*args), seed).to(self.device)


#: Builds a party's own bottom model: ``factory(num_features, embedding_dim) -> nn.Module``.
ModelFactory = Callable[[int, int], nn.Module]


@dataclass
class PassiveContext(_OnDevice):
    """One passive party's data, model factory and link to the server, for one job."""

    party: int
    job: JobSpec
    schedule: Schedule
    features: torch.Tensor  # aligned rows x this party's features
    link: TrainingLink
    model_factory: ModelFactory | None = None
    after_step: AfterStep = _no_checkpoints
    #: Where this party computes (``[compute] device``); ``features`` is there already.
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
