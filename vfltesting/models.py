"""Model factories the tests name by ``module:function``, as a user's own module would hold them.

``vfltesting.models:...`` is importable by the in-process parties and by the daemons the tests start
(``vfltesting.service`` puts this checkout on their PYTHONPATH).
"""

from __future__ import annotations

import torch
from torch import nn

from vflcore.ml.models import mlp

#: The hidden widths of the jobs whose defaults ``mlp_bottom`` and ``mlp_top`` reproduce.
HIDDEN = (64,)


def mlp_bottom(num_features: int, embedding_dim: int) -> nn.Module:
    """The default bottom model of a job with ``bottom_hidden = [64]``: the same layers, drawn the same way."""
    return mlp(num_features, HIDDEN, embedding_dim)


def mlp_top(input_width: int, num_outputs: int) -> nn.Module:
    """The default top (or head) of a job with ``[model] top_hidden = [64]`` and no dropout."""
    return mlp(input_width, HIDDEN, num_outputs)


def small_bottom(num_features: int, embedding_dim: int) -> nn.Module:
    """A party's own model, as a user would bring it with ``[model] factory``: 12 tanh units."""
    return nn.Sequential(nn.Linear(num_features, 12), nn.Tanh(), nn.Linear(12, embedding_dim))


def wide_bottom(num_features: int, embedding_dim: int) -> nn.Module:
    """A passive party's own, wider model (128 hidden units): what a ``[models]`` name stands for."""
    return mlp(num_features, (128,), embedding_dim)


def conv_encoder(num_features: int, embedding_dim: int) -> nn.Module:
    """f_A with layers the old Linear-only artifact could not hold: a Conv1d over the pixels, then LayerNorm."""
    channels = 4
    return nn.Sequential(
        nn.Unflatten(1, (1, num_features)),
        nn.Conv1d(1, channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.LayerNorm(channels * num_features),
        nn.Linear(channels * num_features, embedding_dim),
    )


def layernorm_head(embedding_dim: int, num_outputs: int) -> nn.Module:
    """g_T with a LayerNorm and a GELU between its two Linear layers."""
    return nn.Sequential(nn.Linear(embedding_dim, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, num_outputs))


def one_too_wide(input_width: int, num_outputs: int) -> nn.Module:
    """A broken factory: one output too many."""
    return nn.Linear(input_width, num_outputs + 1)


def not_a_model(input_width: int, num_outputs: int) -> str:
    """A broken factory: it returns no torch module at all."""
    return f"Linear({input_width}, {num_outputs})"


class _RunsAway(nn.Module):
    """``inner``, until it has taken ``steps`` training steps: from then on its training outputs are NaN.

    A training step is a forward pass in training mode with gradients on; scoring runs without
    them, so a party's model diverges at the same step on any CPU, for the tests of what a job
    does when training runs away after some good epochs.
    """

    def __init__(self, inner: nn.Module, steps: int) -> None:
        super().__init__()
        self.inner, self.steps, self.taken = inner, steps, 0

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(features)
        if not (self.training and torch.is_grad_enabled()):
            return out
        self.taken += 1
        return out * float("nan") if self.taken > self.steps else out


def runaway_bottom(num_features: int, embedding_dim: int) -> nn.Module:
    """The default bottom MLP, whose outputs turn NaN after 50 training steps (in the third epoch of a
    digits job with batches of 64 and a validation split)."""
    return _RunsAway(mlp(num_features, HIDDEN, embedding_dim), 50)
