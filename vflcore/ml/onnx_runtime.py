"""How the project opens an ONNX model, and the file name every export has: without torch.

Serving and scoring (``vfl-score``, and each Ray worker a Ray Data scoring job runs on) only read
exported files, so they import this, not ``vflcore.ml.onnx_export``: that module imports torch
and onnx at its top, which a process pays once, for an export it never makes (importing
``vflserver.scoring.engines`` cost 2.8 CPU-s with it, 0.67 without; each Ray worker paid it at
its first scoring task: test_ray_engine cost 38.7 CPU-s, 33.9 without; measured 2026-11-29).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a session is made (``onnx_session`` says why)
    import onnxruntime

__all__ = ["MODEL_FILE", "onnx_session"]

#: The file name every party's export has, in its run folder.
MODEL_FILE = "model.onnx"


def onnx_session(model: bytes | str | Path, *, threads: int = 1) -> onnxruntime.InferenceSession:
    """An onnxruntime CPU session with ``threads`` intra-op threads (one answers batch-1 fastest).

    onnxruntime is imported here, at the first session, not with this module: its import costs a
    daemon about 0.2 s of CPU and starts a native thread at its start, and a daemon makes its
    first session only when a job ends (the export's check) or a model is served.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: its warnings are about graph optimisations
    source = model if isinstance(model, bytes) else str(model)
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
