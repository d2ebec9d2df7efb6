"""APFed's mathematics (seed 000/001 §3–§4): the passive losses and how the active party weighs them.

In APFed the active party sends its representation h^A = f_A(x^A_B) to every passive party; a
passive party scores h^A against its own view of the same rows and returns ∂L_p/∂h^A. Both the
product's client half and the in-process experiment (``bench.algorithms.apfed``) compute L_p through these
functions, so the two cannot drift apart.

- APFed-R (Eq. 12): reconstruct the party's own features from h^A with a decoder, L2 loss.
- APFed-C (Eq. 14–16): a contrastive loss between h^A and the party's encoding h^p = ENC_p(x^p);
  row i's positive pair is (h^A_i, h^p_i), its negatives are every other h^A_j and h^p_j of the batch.
- The active party minimises L_A + Σ_p λ_p L_p (Eq. 8), so ∂L/∂h^A = ∂L_A/∂h^A + Σ_p λ_p ∂L_p/∂h^A
  (Eq. 9); λ_p comes from ``passive_weight``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vflalgorithms.options import algorithm_options
from vflcore.errors import ConfigError
from vflcore.job.schedule import model_seed
from vflcore.job.spec import ACTIVE_PARTY, JobSpec
from vflcore.ml.models import build_seeded, mlp

#: The algorithm names of the two APFed instances.
APFED_R = "apfed_r"
APFED_C = "apfed_c"
#: The ``[model]`` keys of the active party's own f_A and g_T (``vflalgorithms.factories``).
ENCODER_FACTORY, HEAD_FACTORY = "encoder_factory", "head_factory"


def reconstruction_loss(decoded: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """Eq. 12 with the L2 loss: mean squared error between DEC_p(h^A) and the party's own x^p."""
    return F.mse_loss(decoded, features)


def contrastive_loss(active: torch.Tensor, passive: torch.Tensor, temperature: float) -> torch.Tensor:
    """Eq. 14–16: the mean over the batch of -log softmax of row i's positive pair.

    The similarity is the cosine (Eq. 15). Row i's denominator holds s(h^A_i, h^A_j) for j ≠ i
    and s(h^A_i, h^p_j) for every j, each divided by the temperature.
    """
    a = F.normalize(active, dim=1)
    p = F.normalize(passive, dim=1)
    cross = a @ p.T / temperature  # s(h^A_i, h^p_j) / t
    within = a @ a.T / temperature  # s(h^A_i, h^A_j) / t
    eye = torch.eye(len(a), dtype=torch.bool, device=a.device)
    within = within.masked_fill(eye, float("-inf"))  # the indicator 1_{j≠i}
    logits = torch.cat([cross, within], dim=1)
    positives = torch.arange(len(a), device=a.device)  # column i of ``cross`` is row i's positive
    return F.cross_entropy(logits, positives)


def passive_weight(options: Mapping[str, Any], party: int) -> float:
    """λ_p for ``party``: ``party_weights[str(party)]`` if given, else ``weight`` (default 1)."""
    per_party: Mapping[str, Any] = options.get("party_weights", {})
    return float(per_party.get(str(party), options.get("weight", 1.0)))


def active_encoder(job: JobSpec, width: int) -> nn.Module:
    """f_A: the active party's encoder of its own features into h^A (seeded like every bottom model)."""
    if width < 1:
        raise ConfigError(f"{job.algorithm}: the active party needs features of its own (it infers alone)")
    return build_seeded(
        lambda: mlp(width, job.bottom_hidden, job.embedding_dim), model_seed(job.seed, ACTIVE_PARTY, "bottom")
    )


def active_classifier(job: JobSpec, top_hidden: Sequence[int], outputs: int, *, dropout: float = 0.0) -> nn.Module:
    """g_T: the task model on h^A alone, so that prediction needs no passive party (Eq. 11)."""
    return build_seeded(
        lambda: mlp(job.embedding_dim, top_hidden, outputs, dropout=dropout), model_seed(job.seed, ACTIVE_PARTY, "top")
    )


def passive_model(
    job: JobSpec, party: int, width: int, factory: Callable[[int, int], nn.Module] | None = None
) -> nn.Module:
    """Passive party ``party``'s own network: DEC_p (h^A → x^p) for APFed-R, ENC_p (x^p → h^p) for APFed-C.

    ``factory(n_in, n_out)`` is the party's own model builder, if it brings one (``[model] factory``,
    ``vfl-client --model-factory``, or a ``[models]`` name the job gives); the default is an MLP,
    the decoder mirroring the encoder's hidden widths.
    """
    if job.algorithm == APFED_R:
        n_in, n_out, hidden = job.embedding_dim, width, tuple(reversed(job.bottom_hidden))
    else:
        n_in, n_out, hidden = width, job.embedding_dim, tuple(job.bottom_hidden)
    build = factory or (lambda i, o: mlp(i, hidden, o))
    return build_seeded(lambda: build(n_in, n_out), model_seed(job.seed, party, "bottom"))


def passive_loss(job: JobSpec, model: nn.Module, active: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """L_p of one batch: the party's ``model`` scores h^A (``active``) against its features ``features``."""
    if job.algorithm == APFED_R:
        return reconstruction_loss(model(active), features)
    temperature = float(algorithm_options(job.algorithm, job.algorithm_options)["temperature"])
    return contrastive_loss(active, model(features), temperature)


def combine(
    active_loss: torch.Tensor, active: torch.Tensor, passive: Sequence[tuple[float, torch.Tensor]]
) -> torch.Tensor:
    """A scalar whose gradient at h^A is ∂L_A/∂h^A + Σ_p λ_p ∂L_p/∂h^A (Eq. 9).

    Each (λ_p, ∂L_p/∂h^A) pair is a constant from passive party p; the dot product with h^A
    hands exactly λ_p ∂L_p/∂h^A to h^A's backward pass, and nothing to g_T.
    """
    total = active_loss
    for weight, gradient in passive:
        if weight:
            total = total + weight * (active * gradient).sum()
    return total
