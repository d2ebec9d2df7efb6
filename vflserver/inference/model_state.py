"""What a served model can do now, in words an operator reads: serving, degraded, or waiting for a party.

A standalone model (APFed's ONNX) answers whenever it is loaded. A federated model needs every
passive party: while one is missing it is *waiting for party N* (requests fail with 503 naming
it), or *degraded* if ``[serving] degraded`` stands in for that party. ``vfl-jobs show`` (through
the Control API's ``JobInfo.serving``), the metrics (``vfl_served_models``) and ServerReady
(``InferenceHandler.ready``) all read it from here, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vflserver.inference.servable import Servable

SERVING, DEGRADED, WAITING = "serving", "degraded", "waiting"
#: Every state, in the order the metrics list them.
MODEL_STATES = (SERVING, DEGRADED, WAITING)


@dataclass(frozen=True)
class ModelState:
    """``state`` is one of ``MODEL_STATES``; ``missing`` says, per passive party not there, why.

    ``parties`` are the passive parties the model asks (none for a standalone model).
    """

    state: str
    missing: Mapping[int, str] = field(default_factory=dict)
    parties: tuple[int, ...] = ()

    def __str__(self) -> str:
        """``serving``; ``waiting for party 3: why``; ``degraded: party 3 stood in (why)``."""
        if self.state == SERVING:
            return SERVING
        reasons = "; ".join(f"party {party}: {why}" for party, why in sorted(self.missing.items()))
        parties = ", ".join(str(p) for p in sorted(self.missing))
        if self.state == WAITING:
            noun = "party" if len(self.missing) == 1 else "parties"
            return f"waiting for {noun} {parties} ({reasons})"
        return f"degraded: stand-ins for party {parties} ({reasons})"


def needs_parties(servable: Servable) -> bool:
    """Whether ``servable`` asks passive parties for each request (``needs_parties = True``): federated.

    Optional, like ``compute_only``: a servable without the attribute answers alone (standalone).
    """
    return getattr(servable, "needs_parties", False) is True


def model_state(servable: Servable) -> ModelState:
    """The servable's own ``state()`` if it has one (federated models), else serving or waiting by ``ready()``."""
    state = getattr(servable, "state", None)
    if callable(state):
        found = state()
        if isinstance(found, ModelState):
            return found
    return ModelState(SERVING) if servable.ready() else ModelState(WAITING)
