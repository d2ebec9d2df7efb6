"""A model that spans every party (SplitNN, VIM, AdptVFedConv) behind the inference endpoints.

Its inputs are sample IDs: the passive parties hold their features by ID, and each request asks
every one of them for its representation of those rows (federated inference). A party that is
offline makes the request fail with UNAVAILABLE and names the party (``state()``: waiting for it,
until its daemon reconnects and loads its part again), unless a degraded mode was
chosen explicitly: then its representation is replaced, as APFed's baselines do, by zeros
(TVFL-0) or by its mean over the training rows (TVFL-A), and every such request logs a warning.
Only APFed avoids this trade-off: its model belongs to the active party alone (``artifact``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import structlog

from vflalgorithms.halves import ServerAlgorithm
from vflcore.errors import InferenceInputError, PartyUnavailable
from vflcore.job.spec import JobSpec
from vflserver.federation.passive_parties import PassiveParties
from vflserver.inference.config import DEGRADED_MODES
from vflserver.inference.model_state import DEGRADED, SERVING, WAITING, ModelState
from vflserver.inference.servable import TensorSpec, prediction_outputs, prediction_specs

log = structlog.get_logger(__name__)

IDS = "id"


class TrainedParty(Protocol):
    """What federated inference asks of the active party that trained the model (``ActiveParty``).

    Declared here, not imported: training sits above inference, so this module names only the
    calls it makes and ``vflserver.training.active_party.ActiveParty`` has them.
    """

    @property
    def job(self) -> JobSpec: ...

    @property
    def parties(self) -> PassiveParties: ...

    @property
    def algorithm(self) -> ServerAlgorithm: ...

    def representation_means(self) -> dict[int, np.ndarray]:
        """Each passive party's mean representation over the training rows (the TVFL-A stand-in)."""
        ...

    def predict_ids(self, ids: Sequence[str], *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Predictions for sample ``ids``; KeyError if one is not among the aligned rows."""
        ...


class FederatedServable:
    """Sample IDs in, predictions out, with every passive party asked for its part."""

    platform = "vfl-federated"
    #: It asks the passive parties for every request (``model_state.needs_parties``): not a standalone model.
    needs_parties = True

    def __init__(self, active: TrainedParty, *, name: str | None = None, degraded: str = "none") -> None:
        if degraded not in DEGRADED_MODES:
            raise ValueError(f"degraded = {degraded!r}; choose one of {DEGRADED_MODES}")
        self.active = active
        self.degraded = degraded
        self.name = name or active.job.job_id
        self.version = "1"
        self.inputs = [TensorSpec(IDS, "BYTES", (-1,))]
        self.outputs = prediction_specs(active.job.task, active.job.num_outputs)
        self._substitutes = self._stand_ins()

    def _stand_ins(self) -> dict[int, np.ndarray]:
        """The degraded mode's representation per passive party; computed now, while all are online."""
        if self.degraded == "none":
            return {}
        width = self.active.algorithm.upload_width
        if self.degraded == "zeros":
            return {p: np.zeros(width, dtype=np.float32) for p in self.active.job.passive_parties}
        return self.active.representation_means()

    def missing(self) -> dict[int, str]:
        """Each passive party that cannot answer now, with why (its daemon is gone, or still loading its part)."""
        parties = self.active.parties
        found = {p: parties.liveness.absence(p) for p in self.active.job.passive_parties}
        return {p: why for p, why in found.items() if why is not None}

    def state(self) -> ModelState:
        """Serving with every party; else degraded (stand-ins configured) or waiting for the missing ones."""
        missing, parties = self.missing(), tuple(self.active.job.passive_parties)
        if not missing:
            return ModelState(SERVING, parties=parties)
        return ModelState(DEGRADED if self.degraded != "none" else WAITING, missing, parties)

    def ready(self) -> bool:
        return self.degraded != "none" or not self.missing()

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = [as_text(index, value) for index, value in enumerate(np.asarray(inputs[IDS]).reshape(-1).tolist())]
        offline = sorted(self.missing())
        if offline and self._substitutes:
            log.warning(
                "degraded_inference",
                mode=self.degraded,
                offline_parties=offline,
                warning="predictions use stand-in representations for offline parties and are less accurate",
            )
        try:
            output = self.active.predict_ids(ids, substitutes=self._substitutes)
        except KeyError as exc:
            raise InferenceInputError(f"input {IDS!r}: {exc.args[0]}") from None
        except PartyUnavailable as exc:
            raise PartyUnavailable(
                f"{exc}; federated inference needs every passive party (or serving.degraded = zeros | mean), and "
                "the model answers again once the party has reconnected"
            ) from None
        return prediction_outputs(self.active.job.task, output)


def as_text(index: int, value: object) -> str:
    """One requested ID as text, or InferenceInputError naming its position (never its bytes).

    Bytes that are not UTF-8 are refused, not replaced: "a\\xff" read as "a\\ufffd" would be
    answered with the prediction of another sample whose ID holds that character. A JSON string
    may hold a lone surrogate (an escaped "\\udcff"), which no UTF-8 ID holds either.
    """
    if isinstance(value, bytes):
        text = value.decode("utf-8", "surrogateescape")  # a bad byte becomes a lone surrogate, refused below
    else:
        text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InferenceInputError(f"input {IDS!r}: element {index} is not UTF-8 text; send each ID as UTF-8") from None
    return text
