"""Build the torch pieces a party trains: MLPs, user-supplied model factories and optimizers.

Each party builds its own bottom model (and the active party its head) from the job settings.
Initialisation is seeded per party through `build_seeded`, so a rerun with the same seed gives
the same weights without disturbing the global torch RNG that other code may rely on.
"""

from __future__ import annotations

import importlib
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import cast

import torch
from torch import nn

from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, OPTIMIZERS, JobSpec
from vflcore.ml.optimizers import job_optimizer, make_optimizer

__all__ = ["OPTIMIZERS", "build_seeded", "job_optimizer", "load_factory", "make_optimizer", "mlp", "seed_dropout"]


def mlp(in_features: int, hidden: Sequence[int], out_features: int, *, dropout: float = 0.0) -> nn.Sequential:
    """Linear+ReLU blocks of the given hidden widths, then a final Linear with no activation.

    The last layer stays linear because its output is either an embedding handed to another
    party or logits for the loss, and neither should be clipped at zero. ``dropout`` > 0 puts a
    Dropout after every hidden block (a regulariser that is off in eval mode, so it changes
    training only; the serving artifact drops it).
    """
    widths = [in_features, *hidden, out_features]
    if any(width < 1 for width in widths):
        raise ValueError(
            f"layer widths must be positive, got in={in_features} hidden={list(hidden)} out={out_features}"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths[:-1]):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(widths[-2], widths[-1]))
    return nn.Sequential(*layers)


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """Resolve "package.module:function" to a callable that builds a model.

    Lets a party plug in its own architecture by naming it in the config; each failure mode
    gets its own message because the spec is typed by hand.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute or ":" in attribute:
        raise ValueError(f"model factory {spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"model factory {spec!r}: cannot import module {module_name!r} ({exc}); "
            "install it or add its directory to PYTHONPATH"
        ) from exc
    factory = module
    for part in attribute.split("."):
        if not hasattr(factory, part):
            raise ValueError(f"model factory {spec!r}: module {module_name!r} has no attribute {attribute!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ValueError(f"model factory {spec!r}: {attribute!r} is a {type(factory).__name__}, not callable")
    built: Callable[..., nn.Module] = factory
    return built


def linear_head(embedding_dim: int, outputs: int, seed: int) -> nn.Linear:
    """A party's own bias-free linear head W_k (VIMADMM-J), seeded like every model part."""
    head = build_seeded(lambda: nn.Linear(embedding_dim, outputs, bias=False), seed)
    assert isinstance(head, nn.Linear)
    return head


class LinearHeads(nn.Module):
    """Σ_k h^k W_k over a list of embeddings, one bias-free linear head each (004 Eq. 2)."""

    def __init__(self, parts: int, embedding_dim: int, outputs: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(embedding_dim, outputs, bias=False) for _ in range(parts))

    def forward(self, embeddings: list[torch.Tensor]) -> torch.Tensor:
        outputs = [head(h) for head, h in zip(self.heads, embeddings, strict=True)]
        return torch.stack(outputs).sum(dim=0)

    def linears(self) -> list[nn.Linear]:
        """The heads, in embedding order; ``weight`` is W_kᵀ, shaped (outputs, embedding_dim)."""
        return [cast(nn.Linear, head) for head in self.heads]

    def norms(self) -> list[float]:
        """‖W_k‖_F of every head, in embedding order."""
        return [float(torch.linalg.matrix_norm(head.weight.detach())) for head in self.linears()]


_SEEDED_BUILD = threading.Lock()


def seed_dropout(job: JobSpec, part: str = "dropout") -> None:
    """Seed torch's global RNG, which draws the top model's dropout masks, from the job's seed.

    The server calls it just before its first training step and every in-process reference
    when it is built, so that a run with ``[model] top_dropout`` > 0 is reproducible and still
    equals its reference mask for mask. Model initialisation does not use this RNG (``build_seeded``),
    and the lock keeps this seeding out of the middle of another thread's ``build_seeded`` (parties
    sharing one process, as in the SDK and the tests, would otherwise build from the wrong seed).
    ``part`` "student" seeds the distilled student's masks apart from the federated model's.
    """
    with _SEEDED_BUILD:
        torch.manual_seed(model_seed(job.seed, ACTIVE_PARTY, part))


def build_seeded(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Call factory with torch's RNG seeded, restoring the global RNG state afterwards.

    Reproducible initialisation per party, without making the rest of the process's random
    draws depend on how many models were built before.
    """
    # devices=[]: fork only the CPU generator; this service never initialises CUDA. The lock:
    # torch's generator is process-wide, so two parties building at once in one process (the
    # in-process SDK, tests) would otherwise draw from each other's seed.
    with _SEEDED_BUILD, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = factory()
    if not isinstance(module, nn.Module):
        raise TypeError(f"model factory returned {type(module).__name__}, expected a torch.nn.Module")
    return module
