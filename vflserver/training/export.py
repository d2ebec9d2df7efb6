"""The trained model's files: the active party's part as ONNX, and a standalone model's Triton repository.

The graph answers what the inference endpoint answers (probabilities and label, or the
prediction), so a standalone model (APFed) serves unchanged from onnxruntime or Triton. A model
the exporter cannot translate faithfully is logged (``model_export_failed``) and the job still
finishes; a standalone model is then not served (``summary.artifact`` stays None).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import structlog
import torch

from vflalgorithms.halves import ServerAlgorithm
from vflcore.data.tables import PartyTable
from vflcore.errors import ArtifactError
from vflcore.job.schedule import Schedule
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.onnx_export import MODEL_FILE, PROBE_ROWS, export_onnx, part_metadata
from vflserver.inference.artifact import ArtifactInfo
from vflserver.inference.onnx_model import info_metadata
from vflserver.inference.servable import LABEL, PREDICTION, PROBABILITIES
from vflserver.inference.triton_repository import write_triton_repository
from vflserver.training.reports import RunSummary

#: Where the server writes a Triton model repository of every standalone model, in its run folder.
MODEL_REPOSITORY = "model_repository"

log = structlog.get_logger(__name__)


def export_model(
    job: JobSpec,
    table: PartyTable,
    algorithm: ServerAlgorithm,
    schedule: Schedule,
    run_dir: Path,
    repository_root: Path,
    summary: RunSummary,
) -> None:
    """Write the trained part as ``run_dir/model.onnx``; a standalone model also goes into a Triton repository.

    ``summary`` gets the paths written: ``onnx``, and for a standalone model ``artifact`` and
    ``model_repository``.
    """
    info = ArtifactInfo(
        model_name=job.job_id,
        job_id=job.job_id,
        algorithm=job.algorithm,
        task=job.task,
        feature_names=tuple(table.feature_names),
        num_outputs=job.num_outputs,
    )
    standalone = not algorithm.needs_parties_to_predict
    names = (PROBABILITIES, LABEL) if job.task == "classification" else (PREDICTION,)
    part = algorithm.onnx_part(schedule.train_rows[:PROBE_ROWS], _served_outputs(job.task), names)
    metadata = info_metadata(info) if standalone else part_metadata(job, ACTIVE_PARTY)
    path = run_dir / MODEL_FILE
    try:
        worst = export_onnx(replace(part, metadata=metadata), path)
    except (ArtifactError, OSError) as exc:  # training succeeded and the checkpoints hold the weights
        log.error("model_export_failed", path=str(path), error=str(exc))
        return
    summary.onnx = path
    log.info("model_exported", path=str(path), inputs=list(part.inputs), max_difference=worst)
    if standalone:
        summary.artifact = path
        try:
            summary.model_repository = write_triton_repository(path, repository_root, job.job_id)
        except (ArtifactError, OSError) as exc:  # a job id Triton cannot take, a full disk: model.onnx serves
            log.error("model_repository_skipped", error=str(exc))
            return
        log.info("model_repository_written", path=str(summary.model_repository))


def _served_outputs(task: str) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """The raw output as the endpoint's outputs: (probabilities, label), or (prediction,) for regression."""
    if task == "classification":
        return lambda logits: (torch.softmax(logits, dim=1), torch.argmax(logits, dim=1))
    return lambda values: (values,)
