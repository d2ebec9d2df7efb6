"""NaN and infinity in training: how many values are not finite, and what to change when a job diverges.

A job whose training runs away fails with ``TrainingDiverged`` (``vflcore.errors``) wherever it is
found: a half's ``record_step`` (the training loss), what the active party would send
(``vflserver.federation.passive_parties``), what a passive party would send (``vflclient``), and
checkpoints, which are never written from non-finite state. ``nonfinite`` and ``nonfinite_state``
find it; ``divergence_advice`` names the job's settings to change, with their values; an
algorithm's ``AlgorithmSpec.tuning`` adds its own options to them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from vflalgorithms.registry import algorithm_spec
from vflcore.errors import ConfigError, nonfinite_word
from vflcore.job.spec import JobSpec
from vflcore.ml.state import PLAIN_TYPES


def nonfinite(values: np.ndarray | torch.Tensor) -> str | None:
    """How many of ``values`` are NaN or infinite, in words (``"12 of 512 values are NaN"``); None if none.

    Integer arrays are always finite.
    """
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if not np.issubdtype(array.dtype, np.floating):
        return None
    if np.isfinite(array).all():  # one pass for the usual case: every upload, answer and checkpointed tensor
        return None
    nan = int(np.isnan(array).sum())
    infinite = int(np.isinf(array).sum())
    if not nan and not infinite:
        return None
    kinds = " or ".join(kind for kind, count in (("NaN", nan), ("infinite", infinite)) if count)
    return f"{nan + infinite} of {array.size} values are {kinds}"


#: Leaves that are finite by their type: ints (a generator's state words), strings, booleans, None.
_NOTHING_TO_CHECK = frozenset({type(None), bool, int, str})
#: Leaves a list is checked item by item without a call each: those, and plain floats.
_SCALARS = PLAIN_TYPES


def nonfinite_state(state: object, path: str = "") -> str | None:
    """The first NaN or infinite tensor, array or float in a checkpoint's state, in words; None if all are finite.

    ``state`` is what a half's ``state()`` returns (models, optimizers, losses: nested dicts and
    lists). A checkpoint is written only from finite state, so the newest one is always the newest
    finite one.
    """
    if type(state) in _NOTHING_TO_CHECK:
        return None
    if isinstance(state, Mapping):
        for key, value in state.items():
            found = nonfinite_state(value, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(state, list | tuple):
        if all(type(value) in _SCALARS for value in state):
            # Python's generator state (625 ints), the step losses (a float per step so far): one call
            # per item took 1-2 ms of every checkpoint of every party (measured 2026-11-28).
            for i, value in enumerate(state):
                if type(value) is float and not math.isfinite(value):
                    return f"{path}[{i}] is {nonfinite_word(value)}"
            return None
        for i, value in enumerate(state):
            found = nonfinite_state(value, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(state, float):
        return None if math.isfinite(state) else f"{path} is {nonfinite_word(state)}"
    if isinstance(state, torch.Tensor | np.ndarray):
        words = nonfinite(state)
        return None if words is None else f"{path}: {words}"
    return None


#: The ``[job]`` keys that set a step's size, named with their values when training diverges.
#: The per-role keys (``top_learning_rate``, ...) are named only where a job sets them.
_STEP_KEYS = ("learning_rate", "top_learning_rate", "bottom_learning_rate")


def step_advice(job: JobSpec) -> str:
    """The settings that set ``job``'s step size, with their values: "lower `learning_rate` (now 0.1), ...".

    The ``[job]`` learning rates and optimizer, and the algorithm's ``tuning`` options.
    """
    keys = [f"`{key}` (now {getattr(job, key):g})" for key in _STEP_KEYS if getattr(job, key, None) is not None]
    advice = f"lower {' or '.join(keys)}, or try another `optimizer` (now {job.optimizer})"
    try:
        spec = algorithm_spec(job.algorithm)
        options = spec.options(job.algorithm_options)
    except ConfigError:
        return advice
    tuned = [f"`[algorithm] {key}` (now {options[key]})" for key in spec.tuning if key in options]
    return f"{advice}, or change {' or '.join(tuned)}" if tuned else advice


def divergence_advice(job: JobSpec, kept: str = "") -> str:
    """What to do when ``job`` diverged: ``step_advice``, or scale features whose large raw values overflow.

    ``kept`` says which checkpoint the failure keeps ("the newest: the end of epoch 3"), if known.
    """
    return (
        f"{step_advice(job)}, or scale the parties' features if some are large; the checkpoints saved before "
        f"it are kept{f' ({kept})' if kept else ''}, and the job submitted again starts afresh"
    )
