"""Pay a daemon's one-time costs at its start, before it says it is ready, not in its first job.

The first job after a daemon start waited seconds longer than every later one (issue 27:
2.5-4.4 s against 0.2-0.3 s). A profile of the server's job thread put nearly all of it in
building the job's first optimizer: ``torch.optim.Optimizer.__init__`` runs under
``torch._disable_dynamo``, which imports ``torch._dynamo`` (and sympy with it) on first use,
about 1.3 s of CPU here, 12 s under the profiler. Every passive party paid the same when it
built its own optimizer, so on a shared host the parties paid it one after the other. Nothing
else on the way to the first step cost more than a few milliseconds the first time.

``warm_up`` runs one tiny training step per task and optimizer, on the configured device, so
that the imports, kernels and allocator pools a job's first step needs are there before the
daemon listens (``vfl-server``) or dials out (``vfl-client``). Then it moves every object alive
at that point into the collector's permanent generation (``gc.freeze``): they live as long as
the daemon, so no collection needs to walk them again. That also takes them out of the
collection the interpreter runs at exit, which was most of a daemon's exit time after SIGTERM:
about 1 s of CPU with torch and dynamo loaded, 0.2 s once frozen.
"""

from __future__ import annotations

import gc
import time

import structlog

log = structlog.get_logger(__name__)

#: Each task with the output width of its warm-up model: one step for each, as each has its own loss.
_TASKS = (("classification", 2), ("regression", 1))


def warm_up(device: str = "cpu") -> float:
    """One tiny training step per task and optimizer on ``device``, then ``gc.freeze()``; returns seconds.

    torch's global random state is left as it was: the weights here are drawn inside
    ``torch.random.fork_rng``, so a job seeded after start sees the same numbers as without it.
    """
    started = time.perf_counter()
    import torch

    from vflcore.ml.losses import task_loss
    from vflcore.ml.models import OPTIMIZERS, make_optimizer, mlp

    target = torch.device(device)
    with torch.random.fork_rng(devices=[]):
        for task, outputs in _TASKS:
            labels = torch.tensor([0, 1]) if task == "classification" else torch.zeros(2, 1)
            for name in OPTIMIZERS:
                model = mlp(3, [4], outputs).to(target)
                optimizer = make_optimizer(name, model.parameters(), lr=0.01)
                loss = task_loss(task)(model(torch.zeros(2, 3, device=target)), labels.to(target))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    gc.collect()
    gc.freeze()
    seconds = time.perf_counter() - started
    log.info("warmed_up", seconds=round(seconds, 2), device=device, frozen_objects=gc.get_freeze_count())
    return seconds
