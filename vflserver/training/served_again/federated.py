"""At start, serve again the federated model a crashed server was serving, rebuilt from disk.

A federated model is served until the next job starts (``ModelServing.serve``). A clean stop ends
it (``served`` becomes no); a crash (kill -9, SIGSEGV, power) leaves ``served`` yes in the store.
At the next start, if no job is queued (one would take the parties at once, ending the model
anyway), the server rebuilds that job's active party from its run folder
(``ActiveParty.serve_saved``), puts it on the endpoint, and opens its job on the board: each
passive daemon that reconnects is offered it and loads its trained part, as after a passive
restart. Whatever is missing is logged (``model_not_served_again``, with why) and the model
is recorded as not served; the server starts all the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from vflalgorithms.registry import algorithm_spec
from vflcore.errors import VflError
from vflcore.runtime.config import DataSource, ServerSettings
from vflserver.federation.board import JobBoard
from vflserver.inference.federated import FederatedServable
from vflserver.inference.registry import ModelRegistry
from vflserver.plan.admission import read_active_table, read_held_out
from vflserver.plan.document import plan_from_document
from vflserver.training.active_party import ActiveParty
from vflserver.training.served_again.saved_jobs import SavedJob, SavedJobs

log = structlog.get_logger(__name__)


def serve_federated_again(
    records: Sequence[SavedJob],
    store: SavedJobs,
    board: JobBoard,
    registry: ModelRegistry,
    datasets: Mapping[str, DataSource],
    settings: ServerSettings,
) -> ActiveParty | None:
    """Serve again the newest of ``records`` (served, no standalone model); the others are recorded not served.

    Returns the served model's active party (the runner retires it when the next job starts), or None.
    """
    chosen: ActiveParty | None = None
    queued = store.list(states=("queued",))
    for record in sorted(records, key=lambda r: r.ended_at or 0.0, reverse=True):
        if chosen is not None:  # only one federated model is ever served: the newest
            why = "a newer federated model is served again"
        elif queued:
            why = f"job {queued[-1].job_id} is queued and takes the parties when it starts"
        else:
            try:
                chosen = _rebuild(record, board, registry, datasets, settings)
            except (VflError, OSError, ValueError) as exc:
                why = str(exc)
            else:
                log.info(
                    "model_served", job=record.job_id, how="federated, again after a restart, until the next job starts"
                )
                continue
        store.set_served(record.job_id, False)
        log.warning("model_not_served_again", job=record.job_id, why=why)
    return chosen


def _rebuild(
    record: SavedJob,
    board: JobBoard,
    registry: ModelRegistry,
    datasets: Mapping[str, DataSource],
    settings: ServerSettings,
) -> ActiveParty:
    """The job's active party, rebuilt from its run folder, on the endpoint and open on the board."""
    plan = plan_from_document(record.document, default_join_timeout_s=settings.join_timeout_s, job_id=record.job_id)
    if not algorithm_spec(plan.job.algorithm).active_half().needs_parties_to_predict:
        raise ValueError(f"its standalone model is gone from {settings.run_dir / record.job_id}/party-1")
    active = ActiveParty(plan, read_active_table(plan, datasets), settings, held_out=read_held_out(plan, datasets))
    active.serve_saved()
    try:
        registry.add(FederatedServable(active, name=record.job_id, degraded=plan.degraded))
    except ValueError:
        active.shutdown("the model could not be served again")
        raise
    board.open(active.parties, plan.datasets, plan.models)
    return active
