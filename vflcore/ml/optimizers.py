"""The optimizer each model gets: by name, or by the role the model plays in its job.

A job names one optimizer, learning rate and weight decay for every party, and may name others
for a role (``JobSpec.optimizer_for``): the VIM authors, whose code produced the paper's tables,
train the server's model and its heads with plain SGD and the parties' bottom models with SGD
and momentum 0.9. Each party builds the optimizers of the models it holds from the job alone, so
every party, and every in-process reference, builds the same ones.

Models of two roles that step together (SplitNN's top model and the active party's own bottom)
share one optimizer with a parameter group per role when both roles use the same optimizer
class, and otherwise a ``StepTogether`` of two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from vflcore.job.spec import OPTIMIZERS, JobSpec

__all__ = ["StepTogether", "job_optimizer", "make_optimizer", "role_optimizer", "roles_optimizer"]

#: The momentum of "sgd"; "plain_sgd" has none.
SGD_MOMENTUM = 0.9


#: An optimizer class, called with parameters (or parameter groups) and its settings.
Kind = Callable[..., torch.optim.Optimizer]


def _group(name: str, lr: float, weight_decay: float) -> tuple[Kind, dict[str, Any]]:
    """The optimizer class and the settings of one parameter group, for the named optimizer."""
    if lr <= 0:
        raise ValueError(f"learning rate must be positive, got {lr}")
    if not weight_decay >= 0.0:
        raise ValueError(f"weight decay must be zero or positive, got {weight_decay}")
    key = name.lower()
    if key == "sgd":
        return torch.optim.SGD, {"lr": lr, "momentum": SGD_MOMENTUM, "weight_decay": weight_decay}
    if key == "plain_sgd":
        return torch.optim.SGD, {"lr": lr, "momentum": 0.0, "weight_decay": weight_decay}
    if key == "adam":
        return torch.optim.Adam, {"lr": lr, "weight_decay": weight_decay}
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def make_optimizer(
    name: str, params: Iterable[nn.Parameter], lr: float, *, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """Create the named optimizer: "sgd" (momentum 0.9), "plain_sgd" (no momentum) or "adam".

    ``weight_decay`` is the coefficient of an L2 penalty on the parameters, added to their
    gradients (torch's coupled form): the r(Θ) = ‖Θ‖² regularisers of APFed's Table 1.
    """
    kind, settings = _group(name, lr, weight_decay)
    return kind(params, **settings)


def job_optimizer(job: JobSpec, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The job's own optimizer (``optimizer``, ``learning_rate``, ``weight_decay``), for a model of no role.

    The distilled student and AdptVFedConv's classifier-only phases are whole models of one party.
    """
    return make_optimizer(job.optimizer, params, job.learning_rate, weight_decay=job.weight_decay)


def role_optimizer(job: JobSpec, role: str, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer of a model playing ``role`` ("top" or "bottom") in ``job``."""
    choice = job.optimizer_for(role)
    return make_optimizer(choice.name, params, choice.learning_rate, weight_decay=choice.weight_decay)


class StepTogether:
    """Optimizers of different classes that step as one: each role's, in the order given.

    Only what the training loops and checkpoints use: ``zero_grad``, ``step``, ``state_dict``,
    ``load_state_dict`` and ``param_groups``.
    """

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [group for optimizer in self.optimizers for group in optimizer.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [optimizer.state_dict() for optimizer in self.optimizers]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state["optimizers"]
        if len(saved) != len(self.optimizers):
            raise ValueError(f"the checkpoint holds {len(saved)} optimizers; this job has {len(self.optimizers)}")
        for optimizer, one in zip(self.optimizers, saved, strict=True):
            optimizer.load_state_dict(one)


def roles_optimizer(
    job: JobSpec, params_by_role: Mapping[str, Iterable[nn.Parameter]]
) -> torch.optim.Optimizer | StepTogether:
    """One optimizer over models of several roles that step together, each role with its own settings.

    One torch optimizer with a parameter group per role where the roles' optimizers are of one
    class (so a job that gives no role settings has the optimizer it always had); else a
    ``StepTogether`` of one optimizer per role. Roles with no parameters are left out.
    """
    groups: list[tuple[Kind, dict[str, Any]]] = []
    for role, params in params_by_role.items():
        listed = list(params)
        if listed:
            choice = job.optimizer_for(role)
            kind, settings = _group(choice.name, choice.learning_rate, choice.weight_decay)
            groups.append((kind, {"params": listed, **settings}))
    if not groups:
        raise ValueError("an optimizer needs parameters to train")
    kinds = {kind for kind, _ in groups}
    if len(kinds) == 1:
        kind = groups[0][0]
        return kind([group for _, group in groups])
    return StepTogether([kind([group]) for kind, group in groups])
