"""Byte counting per party and phase."""

from __future__ import annotations

import numpy as np

from vflcore import wire
from vflcore.tensors import TensorKey
from vflcore.traffic import Traffic, phase_of, summary_lines


def test_phases_are_named_after_what_the_tensor_is_for() -> None:
    assert phase_of(TensorKey("j", 3, 1, "embedding")) == "train 3"
    assert phase_of(TensorKey("j", 3, 1, "admm/dual")) == "train 3"
    assert phase_of(TensorKey("j", 3, 0, "eval/embedding")) == "eval 3"
    assert phase_of(TensorKey("j", 0, 0, "infer/abc/embedding")) == "infer"
    assert phase_of(TensorKey("j", 0, 0, "psi/members")) == "psi"


def test_counted_chunks_pass_through_unchanged_and_sum_to_their_sizes() -> None:
    traffic = Traffic()
    key = TensorKey("j", 0, 0, "embedding")
    chunks = list(wire.tensor_to_chunks(key, np.ones((1000, 300), np.float32)))  # 1.2 MB: two chunks
    passed = list(traffic.receiving(2, traffic.sending(2, key, chunks)))
    assert passed == chunks
    size = sum(c.ByteSize() for c in chunks)
    assert traffic.report() == {2: {"train 0": {"sent": size, "received": size}}}
    assert traffic.phase_total("train 0") == 2 * size


def test_summary_gives_mb_per_training_round() -> None:
    report = {2: {"psi": {"sent": 5_000_000, "received": 0}, "train 0": {"sent": 1_000_000, "received": 1_000_000}}}
    (line,) = summary_lines(report, own="server")
    assert "6.00 MB sent, 1.00 MB received in total; 2.000 MB per training round (1 rounds)" in line
