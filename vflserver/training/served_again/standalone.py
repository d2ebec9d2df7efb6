"""The models that serve with no passive party, put on the endpoint: after training, and again after a restart.

A finished job leaves up to two such models in the active party's run folder: its own, when the
algorithm predicts alone (APFed's ``model.onnx``, or the ``model.safetensors`` of a run made
before ONNX), and the student of a ``[distill]`` job (``student/model.onnx``, served as
``<job>-student``). Federated models need their parties: ``served_again.federated`` brings them back.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from vflcore.data.checkpoints import party_dir
from vflcore.errors import VflError
from vflcore.job.distill import student_name
from vflcore.job.spec import ACTIVE_PARTY
from vflcore.ml.onnx_export import MODEL_FILE
from vflserver.inference.artifact import LEGACY_FILE
from vflserver.inference.onnx_model import is_standalone, load_servable
from vflserver.inference.registry import ModelRegistry
from vflserver.training.distillation import STUDENT_DIR
from vflserver.training.served_again.saved_jobs import SavedJob, SavedJobs

log = structlog.get_logger(__name__)


def serve_student(registry: ModelRegistry, job_id: str, model: Path | None) -> None:
    """Serve job ``job_id``'s distilled student from ``model``, if it is a standalone model there."""
    if model is None or not is_standalone(model):
        return
    name = student_name(job_id)
    try:
        registry.add(load_servable(model, name=name))
    except (OSError, VflError, ValueError) as exc:
        log.warning("artifact_unreadable", job=job_id, path=str(model), error=str(exc))
        return
    log.info("model_served", job=job_id, model=name, how="distilled student, standalone")


def serve_saved_models(registry: ModelRegistry, store: SavedJobs, run_dir: Path) -> list[SavedJob]:
    """After a restart: serve again every finished job's standalone model and student.

    The standalone model is the active party's ``model.onnx`` when its metadata says so (every
    party of every job exports its part under that name), else the ``model.safetensors`` of a
    run made before ONNX. A job whose standalone model cannot be served any more is recorded as
    not served. Returns the served jobs that have no standalone model: federated models, which
    ``served_again.federated`` serves again (or records as not served).
    """
    federated: list[SavedJob] = []
    for record in store.list(states=("finished",)):
        folder = party_dir(run_dir, record.job_id, ACTIVE_PARTY)
        if "distill" in record.document and record.document.get("serving", {}).get("enabled", True):
            serve_student(registry, record.job_id, folder / STUDENT_DIR / MODEL_FILE)
        if not record.served:
            continue
        onnx_file, legacy = folder / MODEL_FILE, folder / LEGACY_FILE
        model = onnx_file if is_standalone(onnx_file) else legacy if legacy.exists() else None
        if model is None:
            federated.append(record)
            continue
        try:
            registry.add(load_servable(model, name=record.job_id))
            continue
        except (OSError, VflError, ValueError) as exc:
            log.warning("artifact_unreadable", job=record.job_id, path=str(model), error=str(exc))
        store.set_served(record.job_id, False)
    return federated
