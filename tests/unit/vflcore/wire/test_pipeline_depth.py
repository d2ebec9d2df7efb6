"""``[algorithm] pipeline_depth``: a passive party sends up to d batches ahead of the gradient it awaits.

The order of a passive half's uploads and downloads is what the option changes, so these tests
run SplitNN's passive half over an in-memory link that records it and answers each upload with
a gradient computed from it. (The real link, over mTLS with a real server, is in
``tests/integration/algorithms/test_micro_batches.py``.)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from vflalgorithms.contexts import PassiveContext
from vflalgorithms.options import algorithm_options
from vflalgorithms.splitnn.passive import SplitNNClient
from vflcore.errors import ConfigError
from vflcore.job.spec import JobSpec
from vflcore.wire.links import TensorExchange, TrainingLink
from vflcore.wire.tensors import TensorKey

JOB = JobSpec(
    job_id="pipeline",
    algorithm="splitnn",
    seed=3,
    batch_size=8,
    embedding_dim=4,
    bottom_hidden=(8,),
    num_rows=40,
    test_fraction=0.0,
    passive_parties=(2,),
)


class RecordingLink(TrainingLink):
    """Answers each upload h at once with 0.1·h (the gradient of 0.05‖h‖²), and writes down what happened when."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        raise AssertionError("a training step travels on an exchange")

    def receive(self, key: TensorKey) -> np.ndarray:
        raise AssertionError("a training step travels on an exchange")

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        link, name = self, down if isinstance(down, str) else down[0]

        class Exchange(TensorExchange):
            def __init__(self) -> None:
                self.uploads: dict[int, np.ndarray] = {}

            def send(self, batch: int, array: np.ndarray) -> None:
                link.events.append(("send", batch))
                self.uploads[batch] = array

            def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
                link.events.append(("receive", batch))
                return {name: np.float32(0.1) * self.uploads[batch]}

            def close(self) -> None:
                pass

            def cancel(self) -> None:
                pass

        return Exchange()


def train(depth: int, parts: int = 1) -> tuple[list[tuple[str, int]], list[tuple[int, int]], SplitNNClient]:
    """One epoch of SplitNN's passive half; (link events, checkpoint positions after each step, the half)."""
    job = replace(JOB, algorithm_options={"pipeline_depth": depth, "micro_batches": parts})
    link, steps = RecordingLink(), []
    features = torch.from_numpy(np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32))
    half = SplitNNClient(
        PassiveContext(
            party=2,
            job=job,
            schedule=job.schedule(),
            features=features,
            link=link,
            after_step=lambda epoch, done, per_epoch: steps.append((done, per_epoch)),
        )
    )
    torch.manual_seed(0)
    half.train_epoch(0)
    return link.events, steps, half


def test_without_staleness_each_upload_waits_for_the_gradient_before() -> None:
    events, steps, _ = train(depth=0)
    assert events == [(kind, b) for b in range(5) for kind in ("send", "receive")]
    assert steps == [(b, 5) for b in range(1, 6)]


def test_depth_two_sends_two_batches_ahead_and_still_steps_once_per_batch() -> None:
    events, steps, _ = train(depth=2)
    assert events == [
        ("send", 0),
        ("send", 1),
        ("send", 2),
        ("receive", 0),
        ("send", 3),
        ("receive", 1),
        ("send", 4),
        ("receive", 2),
        ("receive", 3),
        ("receive", 4),
    ]
    assert steps == [(b, 5) for b in range(1, 6)]  # checkpoints count applied steps, in order


def test_a_depth_beyond_the_epoch_sends_everything_first() -> None:
    events, _, _ = train(depth=10)
    assert events[:5] == [("send", b) for b in range(5)]


def test_parts_and_depth_combine() -> None:
    """With 2 parts per batch, a batch is two wire indexes; depth counts batches."""
    events, _, _ = train(depth=1, parts=2)
    assert events[:6] == [("send", 0), ("send", 1), ("send", 2), ("send", 3), ("receive", 0), ("receive", 1)]


def test_staleness_changes_the_weights_the_exact_step_would_reach() -> None:
    """Staleness is not the same maths: after one epoch the bottom model differs from depth 0's."""
    exact, stale = train(depth=0)[2], train(depth=2)[2]
    assert not all(torch.equal(a, b) for a, b in zip(exact.bottom.parameters(), stale.bottom.parameters(), strict=True))


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_a_depth_that_is_not_a_whole_number_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[algorithm\] pipeline_depth must be a whole number of at least 0"):
        algorithm_options("splitnn", {"pipeline_depth": value})
