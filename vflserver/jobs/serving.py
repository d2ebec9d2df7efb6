"""Which finished jobs' models the inference endpoint serves, and the federated one kept after its job.

A finished job's model is added to the endpoint's registry before the job is recorded finished,
so whoever sees it finished can query it: a standalone artifact (and a distilled student) for
as long as the server runs, a federated model only until the next job starts, since that model
holds its parties. At start-up the models saved by earlier runs are served again, a federated
one too if its parties come back (``served_again.federated``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import structlog

from vflalgorithms.registry import algorithm_spec
from vflcore.errors import VflError
from vflcore.runtime.config import DataSource, ServerSettings
from vflserver.federation.board import JobBoard
from vflserver.inference.federated import FederatedServable
from vflserver.inference.model_state import ModelState, model_state
from vflserver.inference.onnx_model import load_servable
from vflserver.inference.registry import ModelRegistry
from vflserver.jobs.store import JobStore
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
from vflserver.training.reports import RunSummary
from vflserver.training.served_again.federated import serve_federated_again
from vflserver.training.served_again.standalone import serve_saved_models, serve_student

log = structlog.get_logger(__name__)


class ModelServing:
    """The models the runner's jobs left served (``registry``; none without one), and the federated one kept."""

    def __init__(
        self,
        store: JobStore,
        board: JobBoard,
        registry: ModelRegistry | None,
        datasets: Mapping[str, DataSource],
        settings: ServerSettings,
    ) -> None:
        self.store, self.board, self.registry = store, board, registry
        self.datasets, self.settings = datasets, settings
        self._kept: ActiveParty | None = None  # a federated model kept served after its job

    def start(self) -> None:
        """Serve again what earlier runs of the server left served."""
        if self.registry is not None:
            federated = serve_saved_models(self.registry, self.store, self.settings.run_dir)
            args = (self.store, self.board, self.registry, self.datasets, self.settings)
            self._kept = serve_federated_again(federated, *args)  # after a crash; retired as the next job starts

    def federated(self, plan: JobPlan) -> bool:
        """Whether ``plan``'s model, once trained, is served federated (its parties kept for it)."""
        return (
            self.registry is not None
            and plan.serve
            and not plan.psi_only
            and algorithm_spec(plan.job.algorithm).active_half().needs_parties_to_predict
        )

    def keeps(self, active: ActiveParty) -> bool:
        """Whether ``active``'s parties stay open for its served model after its job."""
        return self._kept is active

    def serve(self, active: ActiveParty, plan: JobPlan, summary: RunSummary, serve_federated: bool) -> None:
        job_id = active.job.job_id
        if self.registry is not None and plan.serve:
            if summary.student is not None:  # alone, whatever the job's own model needs
                serve_student(self.registry, job_id, summary.student.artifact)
            if summary.artifact is not None:
                self.registry.add(load_servable(summary.artifact, name=job_id))
                self.store.set_served(job_id, True)
                log.info("model_served", job=job_id, how="standalone artifact")
            elif serve_federated:
                try:
                    self.registry.add(FederatedServable(active, name=job_id, degraded=plan.degraded))
                except ValueError:  # not served: its parties, kept for it, may leave
                    active.shutdown("the model could not be served")
                    raise
                self.store.set_served(job_id, True)
                self._kept = active
                log.info("model_served", job=job_id, how="federated, until the next job starts")

    def retire(self, why: str) -> None:
        """End the federated model kept served after its job: its parties are needed elsewhere."""
        active, self._kept = self._kept, None
        if active is None:
            return
        job_id = active.job.job_id
        if self.registry is not None:
            with contextlib.suppress(VflError):  # already gone
                self.registry.remove(job_id)
        active.shutdown(f"the model is no longer served: {why}")
        self.board.close(active.parties)
        self.store.set_served(job_id, False)
        log.info("model_unserved", job=job_id, why=why)

    def model_state(self, job_id: str) -> ModelState | None:
        """What ``job_id``'s served model can do now (serving, degraded, waiting for a party); None if not served."""
        if self.registry is None:
            return None
        try:
            return model_state(self.registry.get(job_id).servable)
        except LookupError:  # ModelNotFound: not served
            return None

    def model_states(self) -> list[ModelState]:
        """The state of every served model, for the metrics."""
        return [model_state(entry.servable) for entry in self.registry.models()] if self.registry is not None else []
