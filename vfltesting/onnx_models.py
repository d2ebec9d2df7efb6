"""A standalone ONNX model exported as the active party exports an APFed model, and tables to score with it.

``export_standalone`` runs ``export_onnx`` with softmax and argmax inside the graph and
``info_metadata`` in the file, and returns the torch reference the ONNX answers are checked
against; ``customers`` and ``write_input`` make the Parquet input folders ``vfl-score`` reads
(the local engine's tests and the Ray engine's, which must give the same scores).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from vflcore.ml.models import build_seeded
from vflcore.ml.onnx_export import OnnxPart, export_onnx
from vflserver.inference.artifact import LABEL, PREDICTION, PROBABILITIES, ArtifactInfo
from vflserver.inference.onnx_model import info_metadata

__all__ = [
    "CLASSES",
    "FEATURES",
    "ConvRegressor",
    "Reference",
    "artifact_info",
    "customers",
    "export_standalone",
    "feature_names",
    "feature_rows",
    "small_classifier",
    "write_input",
]

#: The model's inputs and, for the classifier, its classes.
FEATURES, CLASSES = 6, 3


def artifact_info(task: str, *, features: int = FEATURES, outputs: int = CLASSES) -> ArtifactInfo:
    """What the exported file says about itself: a job named for its task, features f0, f1, ..."""
    return ArtifactInfo(
        model_name=f"{task[:3]}-job",
        job_id=f"{task[:3]}-job",
        algorithm="apfed_c" if task == "classification" else "apfed_r",
        task=task,
        feature_names=tuple(f"f{i}" for i in range(features)),
        num_outputs=outputs,
    )


def small_classifier() -> nn.Module:
    """Linear, LayerNorm, ReLU, Linear: LayerNorm is what the legacy artifact could not hold."""
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, CLASSES))


class ConvRegressor(nn.Module):
    """A Conv1d over the feature vector, then a linear head: a single value per row."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, kernel_size=3)
        self.head = nn.Linear(4 * (FEATURES - 2), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(torch.relu(self.conv(x.unsqueeze(1))).flatten(1))
        return out


def feature_rows(n: int, seed: int) -> np.ndarray:
    """``n`` seeded rows of the model's features, float32."""
    return np.random.default_rng(seed).normal(size=(n, FEATURES)).astype(np.float32)


#: The torch model's answer to some rows, by output name.
Reference = Callable[[np.ndarray], dict[str, np.ndarray]]


def export_standalone(path: Path, task: str, *, metadata: dict[str, str] | None = None) -> Reference:
    """Export a seeded model of ``task`` to ``path`` as the active party would; its torch reference."""
    builder = small_classifier if task == "classification" else ConvRegressor
    network = build_seeded(builder, 0).eval().requires_grad_(False)

    def forward(features: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        output: torch.Tensor = network(features)
        if task == "classification":
            return torch.softmax(output, dim=1), output.argmax(dim=1)
        return output

    names = (PROBABILITIES, LABEL) if task == "classification" else (PREDICTION,)
    meta = info_metadata(artifact_info(task)) if metadata is None else metadata
    export_onnx(OnnxPart(forward, {"features": torch.from_numpy(feature_rows(16, seed=1))}, names, meta), path)

    def reference(features: np.ndarray) -> dict[str, np.ndarray]:
        with torch.no_grad():
            output = forward(torch.from_numpy(features))
        outputs = output if isinstance(output, tuple) else (output,)
        return {name: tensor.numpy() for name, tensor in zip(names, outputs, strict=True)}

    return reference


def feature_names() -> list[str]:
    """The feature columns the exported model reads: f0, f1, ..."""
    return [f"f{i}" for i in range(FEATURES)]


def customers(rows: int, seed: int, *, prefix: str = "c") -> pa.Table:
    """IDs, the model's features in a shuffled column order (float64 and float32), and a column it ignores."""
    rng = np.random.default_rng(seed)
    columns: dict[str, object] = {"id": [f"{prefix}{i:06d}" for i in range(rows)], "segment": rng.integers(0, 5, rows)}
    for name in reversed(feature_names()):
        columns[name] = rng.normal(size=rows).astype(np.float64 if name.endswith(("1", "3")) else np.float32)
    return pa.table(columns)


def write_input(folder: Path, tables: dict[str, pa.Table], row_group_size: int = 700) -> Path:
    """Each table as a Parquet file under ``folder``, by its relative name: the input folder ``vfl-score`` reads."""
    for name, table in tables.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / name, row_group_size=row_group_size)
    return folder
