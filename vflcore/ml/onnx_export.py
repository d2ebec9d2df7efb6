"""Export a party's trained part to ONNX, and prove the file computes what the torch model computes.

ONNX is the standard form a model leaves a training framework in: onnxruntime, NVIDIA Triton and
KServe all load it, and loading it runs no Python (unlike a pickle), so a model file from another
organisation is data, not code. Every party writes its trained part as ``model.onnx`` next to its
checkpoints (``vflcore.data.checkpoints``).

The exporter is torch's TorchScript-based one (``dynamo=False``). The newer torch.export-based
exporter needs the extra ``onnxscript`` package and took 0.5-2 s per small model here, against
0.06 s; every job of the test suite exports from every party, so the older one is used while
torch ships it (torch < 2.14 is pinned). Its deprecation warning is expected and silenced here.

An export is only written after onnxruntime, run on the probe batch, agrees with torch within
``TOLERANCE`` on every output: a model the exporter mistranslates fails loudly at the end of
training, not silently when it is served.
"""

from __future__ import annotations

import io
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import torch
from torch import nn

from vflcore.data.checkpoints import atomic_write
from vflcore.errors import ArtifactError
from vflcore.job.spec import JobSpec
from vflcore.ml.onnx_runtime import MODEL_FILE, onnx_session

if TYPE_CHECKING:  # imported where a session is made (``onnx_session`` says why)
    import onnxruntime

__all__ = ["MODEL_FILE", "OPSET", "PROBE_ROWS", "TOLERANCE", "OnnxPart", "export_onnx", "onnx_session", "part_metadata"]

#: ONNX opset 17: LayerNorm is a single operator from 17 on, and Triton 23.x+ reads it.
OPSET = 17
#: Rows of a party's aligned training data that its export is checked on.
PROBE_ROWS = 8
#: Largest difference between torch and onnxruntime accepted on the probe batch (absolute + relative).
TOLERANCE = 1e-5


@dataclass(frozen=True)
class OnnxPart:
    """What one party exports: a tensor function, its named probe inputs, and its output names.

    ``forward`` takes the inputs positionally, in ``inputs`` order; dimension 0 of every input
    and output is the batch and stays free in the exported graph.
    """

    forward: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]
    inputs: Mapping[str, torch.Tensor]
    outputs: Sequence[str]
    #: ``key: value`` strings stored in the ONNX file's metadata (job, task, feature names, ...).
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: The modules ``forward`` uses: their parameters become the graph's weights.
    modules: Sequence[nn.Module] = ()


def part_metadata(job: JobSpec, party: int) -> dict[str, str]:
    """What a party's export says about itself in its ONNX metadata: job, algorithm, party, task."""
    return {"vfl.job_id": job.job_id, "vfl.algorithm": job.algorithm, "vfl.party": str(party), "vfl.task": job.task}


#: torch's ONNX exporter keeps global state: two exports at once (parties sharing a process, as in
#: the SDK and the tests) fail with "GLOBALS.in_onnx_export must be True".
_EXPORTING = threading.Lock()


class _Traced(nn.Module):
    """An ``nn.Module`` around a tensor function: what the exporter traces.

    The modules the function uses are registered here, so the tracer sees their parameters as
    weights (it refuses a parameter reached only through a closure). Any structure of modules
    can thus be exported through one function.
    """

    def __init__(self, part: OnnxPart) -> None:
        super().__init__()
        self._forward = part.forward
        own = [part.forward] if isinstance(part.forward, nn.Module) else []
        self.parts = nn.ModuleList([*own, *part.modules])

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        return self._forward(*inputs)


def _as_tuple(output: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return output if isinstance(output, tuple) else (output,)


def _export_bytes(part: OnnxPart) -> bytes:
    names = list(part.inputs)
    probes = tuple(t.detach() for t in part.inputs.values())  # on the party's device, with its model
    dynamic = {name: {0: "batch"} for name in [*names, *part.outputs]}
    buffer = io.BytesIO()
    with _EXPORTING, warnings.catch_warnings():
        # The TorchScript exporter's deprecation notice (module doc) and its tracer's hints; a
        # size the tracer froze into the graph is caught by ``_check``'s second batch size.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Traced(part).eval(),  # a fresh module trains by default; the exporter restores that mode
            probes,
            buffer,  # type: ignore[arg-type]  # torch accepts a binary file object
            input_names=names,
            output_names=list(part.outputs),
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load_from_string(buffer.getvalue())
    for key, value in sorted(part.metadata.items()):
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def _check(data: bytes, part: OnnxPart, where: Path) -> float:
    """Run the export on the probe batch and on its first row; the largest difference to torch, or ArtifactError.

    Two batch sizes: a graph whose batch dimension the tracer froze would pass on the probe's
    own size and fail on any other.
    """
    session = onnx_session(data)
    worst = 0.0
    for rows in (None, 1):
        inputs = [t if rows is None else t[:rows] for t in part.inputs.values()]
        worst = max(worst, _compare(session, part, dict(zip(part.inputs, inputs, strict=True)), where))
    return worst


def _compare(
    session: onnxruntime.InferenceSession, part: OnnxPart, inputs: Mapping[str, torch.Tensor], where: Path
) -> float:
    with torch.no_grad():
        expected = [t.detach().cpu().numpy() for t in _as_tuple(part.forward(*inputs.values()))]
    # The exporter drops an input the model never reads (a federated top that ignores the active
    # party's own features): feed what the graph declares.
    declared = {i.name for i in session.get_inputs()}
    feeds = {name: t.detach().cpu().numpy() for name, t in inputs.items() if name in declared}
    try:
        got = session.run(list(part.outputs), feeds)
    except Exception as exc:  # onnxruntime's own error types; the model is at fault, not the caller
        raise ArtifactError(
            f"{where}: the exported graph fails on a batch of {len(next(iter(feeds.values())))} rows ({exc})"
        ) from None
    worst = 0.0
    for name, want, have in zip(part.outputs, expected, got, strict=True):
        if want.shape != have.shape:
            raise ArtifactError(f"{where}: ONNX output {name!r} has shape {list(have.shape)}, torch {list(want.shape)}")
        if want.size and np.issubdtype(want.dtype, np.floating):
            diff = np.abs(want.astype(np.float64) - have.astype(np.float64))
            worst = max(worst, float(diff.max()))
            if not np.allclose(have, want, rtol=TOLERANCE, atol=TOLERANCE):
                raise ArtifactError(
                    f"{where}: ONNX output {name!r} differs from torch by up to {float(diff.max()):.3g} on the "
                    f"probe batch (allowed {TOLERANCE:g}); the exporter does not translate this model faithfully"
                )
        elif not np.array_equal(want, have):
            raise ArtifactError(f"{where}: ONNX output {name!r} differs from torch on the probe batch")
    return worst


def export_onnx(part: OnnxPart, path: Path) -> float:
    """Write ``part`` to ``path`` as ONNX once onnxruntime reproduces torch on its probe batch.

    Returns the largest absolute difference seen. Written atomically and readable by others (a
    model is no secret). Raises ArtifactError naming the file if the export fails or differs.
    """
    try:
        data = _export_bytes(part)
    except (RuntimeError, ValueError, TypeError, onnx.checker.ValidationError) as exc:
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"{path}: torch cannot export this model to ONNX ({reason})") from exc
    worst = _check(data, part, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(data, path, mode=0o644)  # a server such as Triton may run as another user
    return worst
