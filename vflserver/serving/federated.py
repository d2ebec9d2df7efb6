"""A model that spans every party (SplitNN, VIM, AdptVFedConv) behind the inference endpoints.

Its inputs are sample IDs: the passive parties hold their features by ID, and each request asks
every one of them for its representation of those rows (federated inference). A party that is
offline makes the request fail with UNAVAILABLE and names the party, unless a degraded mode was
chosen explicitly: then its representation is replaced, as APFed's baselines do, by zeros
(TVFL-0) or by its mean over the training rows (TVFL-A), and every such request logs a warning.
Only APFed avoids this trade-off: its model belongs to the active party alone (``artifact``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import structlog

from vflcore.errors import PartyUnavailable as PartyOffline
from vflserver.active_party import ActiveParty
from vflserver.serving.artifact import LABEL, PREDICTION, PROBABILITIES
from vflserver.serving.config import DEGRADED_MODES
from vflserver.serving.servable import InferenceInputError, PartyUnavailable, TensorSpec

log = structlog.get_logger(__name__)

IDS = "id"


class FederatedServable:
    """Sample IDs in, predictions out, with every passive party asked for its part."""

    platform = "vfl-federated"

    def __init__(self, active: ActiveParty, *, name: str | None = None, degraded: str = "none") -> None:
        if degraded not in DEGRADED_MODES:
            raise ValueError(f"degraded = {degraded!r}; choose one of {DEGRADED_MODES}")
        self.active = active
        self.degraded = degraded
        self._name = name or active.job.job_id
        outputs = active.job.num_outputs
        if active.job.task == "classification":
            self._outputs = [TensorSpec(PROBABILITIES, "FP32", (-1, outputs)), TensorSpec(LABEL, "INT64", (-1,))]
        else:
            self._outputs = [TensorSpec(PREDICTION, "FP32", (-1, 1))]
        self._substitutes = self._stand_ins()

    def _stand_ins(self) -> dict[int, np.ndarray]:
        """The degraded mode's representation per passive party; computed now, while all are online."""
        if self.degraded == "none":
            return {}
        width = self.active.algorithm.upload_width
        if self.degraded == "zeros":
            return {p: np.zeros(width, dtype=np.float32) for p in self.active.job.passive_parties}
        return self.active.representation_means()

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return "1"

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec(IDS, "BYTES", (-1,))]

    @property
    def outputs(self) -> list[TensorSpec]:
        return self._outputs

    def ready(self) -> bool:
        if self.degraded != "none":
            return True
        online = set(self.active.federation.online_parties())
        return all(p in online for p in self.active.job.passive_parties)

    def predict(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = [_as_text(value) for value in np.asarray(inputs[IDS]).reshape(-1)]
        offline = [p for p in self.active.job.passive_parties if p not in self.active.federation.online_parties()]
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
        except PartyOffline as exc:
            raise PartyUnavailable(
                f"{exc}; federated inference needs every passive party (or serving.degraded = zeros | mean)"
            ) from None
        if self.active.job.task != "classification":
            return {PREDICTION: output.astype(np.float32, copy=False)}
        shifted = np.exp(output - output.max(axis=1, keepdims=True))
        return {
            PROBABILITIES: (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32),
            LABEL: output.argmax(axis=1).astype(np.int64),
        }


def _as_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
