"""The model ``vfl-score`` runs: a standalone ONNX model, its feature names, and how rows go through it.

The model is what an APFed job leaves in the active party's run folder (or a Triton repository
holding it, ``vflserver.inference.onnx_model.load_servable``): the active party's whole model,
which scores a customer from the active party's own features. ``ScoringModel`` keeps the file's
bytes and its metadata, so it can be handed to Ray workers (it pickles as plain data) and each
worker builds its own onnxruntime session from the same bytes.

Same scores on every engine. A row's score must not depend on which engine ran it or which rows
ran with it. Two things could make it: threads (a GEMM split over threads may sum in another
order) and batch shape (onnxruntime's MLAS picks kernels by the number of rows; a one-row GEMM
takes a different path). So every session has one intra-op thread (``onnx_session(threads=1)``),
and ``score`` runs the rows of one unit of work in runs of exactly ``ROWS_PER_RUN`` rows counted
from the unit's first row, whatever engine called it: the same row always meets the same run,
the same neighbours and the same kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime

from vflcore.errors import ArtifactError
from vflcore.ml.onnx_runtime import onnx_session
from vflserver.inference.artifact import FEATURES, LABEL, PROBABILITIES
from vflserver.inference.onnx_model import OnnxServable, load_servable

__all__ = ["ROWS_PER_RUN", "ScoringModel"]

#: Rows per onnxruntime call: large enough that per-call overhead vanishes, small enough that a
#: run's activations stay in cache-friendly megabytes. A constant, so scores never depend on it.
ROWS_PER_RUN = 8192


@dataclass(frozen=True)
class ScoringModel:
    """A standalone model's bytes, the features it reads (in order) and the columns it writes."""

    path: Path
    data: bytes
    feature_names: tuple[str, ...]
    task: str
    #: The graph's outputs, in the order ``session.run`` is asked for them.
    outputs: tuple[str, ...]
    #: Classes of a classifier (the width of ``probabilities``); 1 for regression.
    num_outputs: int

    @classmethod
    def load(cls, path: Path) -> ScoringModel:
        """The model at ``path``: a ``model.onnx``, a Triton repository or a run folder holding one.

        ArtifactError names ``path`` if it is missing, not a standalone ONNX model, or a legacy
        ``model.safetensors`` (export it again as ONNX: this scorer runs onnxruntime).
        """
        servable = load_servable(path)
        if not isinstance(servable, OnnxServable):
            raise ArtifactError(
                f"{path}: a legacy model.safetensors; vfl-score runs ONNX models: score the model.onnx the job "
                "wrote next to it, or train again with this version"
            )
        return cls(
            path=servable.path,
            data=servable.path.read_bytes(),
            feature_names=servable.info.feature_names,
            task=servable.info.task,
            outputs=tuple(spec.name for spec in servable.outputs),
            num_outputs=servable.info.num_outputs,
        )

    def session(self) -> onnxruntime.InferenceSession:
        """A fresh onnxruntime session with one intra-op thread (the module docstring says why)."""
        return onnx_session(self.data, threads=1)

    def columns(self) -> list[str]:
        """The score columns written next to the ID: ``label`` and ``probability_<k>``, or ``prediction``."""
        names: list[str] = []
        for output in self.outputs:
            if output == PROBABILITIES:
                names.extend(f"probability_{k}" for k in range(self.num_outputs))
            else:
                names.append(output)
        return names

    def score(self, session: onnxruntime.InferenceSession, features: np.ndarray) -> dict[str, np.ndarray]:
        """Every score column for ``features`` [n, F] float32, run ``ROWS_PER_RUN`` rows at a time from row 0."""
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.outputs}
        for start in range(0, max(len(features), 1), ROWS_PER_RUN):
            run = np.ascontiguousarray(features[start : start + ROWS_PER_RUN])
            for name, result in zip(self.outputs, session.run(list(self.outputs), {FEATURES: run}), strict=True):
                parts[name].append(np.asarray(result))
        return self._as_columns({name: np.concatenate(chunks) for name, chunks in parts.items()})

    def _as_columns(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        columns: dict[str, np.ndarray] = {}
        for name, values in outputs.items():
            if name == PROBABILITIES:
                for k in range(self.num_outputs):
                    columns[f"probability_{k}"] = np.ascontiguousarray(values[:, k])
            elif name == LABEL:
                columns[name] = values.reshape(-1).astype(np.int64, copy=False)
            else:
                columns[name] = values.reshape(-1)
        return columns
