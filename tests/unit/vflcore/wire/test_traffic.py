"""Byte counting per party and phase."""

from __future__ import annotations

import numpy as np

from vflcore.wire import serde as wire
from vflcore.wire.metered import MeteredTensors
from vflcore.wire.tensors import TensorKey
from vflcore.wire.traffic import MAX_PHASES_PER_PEER, OTHER, Traffic, phase_of, summary_lines


def test_phases_are_named_after_what_the_tensor_is_for() -> None:
    assert phase_of(TensorKey("j", 3, 1, "embedding")) == "train 3"
    assert phase_of(TensorKey("j", 3, 1, "admm/dual")) == "train 3"
    assert phase_of(TensorKey("j", 3, 0, "eval/embedding")) == "eval 3"
    assert phase_of(TensorKey("j", 0, 0, "infer/abc/embedding")) == "infer"
    assert phase_of(TensorKey("j", 0, 0, "psi/members")) == "psi"


def test_the_codec_counts_every_chunk_it_encodes_and_decodes() -> None:
    """Bytes are counted where tensors become messages (``MeteredTensors``), not by each caller."""
    traffic = Traffic()
    codec = MeteredTensors(traffic, 2)
    key = TensorKey("j", 0, 0, "embedding")
    array = np.ones((1000, 300), np.float32)  # 1.2 MB: two chunks
    chunks = list(codec.encode(key, array))
    assert chunks == list(wire.tensor_to_chunks(key, array))
    got, back = codec.decode(chunks)
    assert got == key and np.array_equal(back, array)
    size = sum(c.ByteSize() for c in chunks)
    assert traffic.report() == {2: {"train 0": {"sent": size, "received": size}}}
    assert traffic.phase_total("train 0") == 2 * size


def test_summary_gives_mb_per_training_round() -> None:
    report = {2: {"psi": {"sent": 5_000_000, "received": 0}, "train 0": {"sent": 1_000_000, "received": 1_000_000}}}
    (line,) = summary_lines(report, own="server")
    assert "6.00 MB sent, 1.00 MB received in total; 2.000 MB per training round (1 rounds)" in line


def test_a_peer_naming_a_new_round_in_every_chunk_cannot_grow_the_counters() -> None:
    """Chunks are counted before their key is checked: past the cap, a peer's new phases go to "other"."""
    traffic = Traffic()
    for round_ in range(MAX_PHASES_PER_PEER + 1000):
        traffic.add(2, TensorKey("job", round_, 0, "embedding"), received=10)
    traffic.add(3, TensorKey("job", 0, 0, "embedding"), received=7)
    report = traffic.report()
    assert len(report[2]) == MAX_PHASES_PER_PEER + 1
    assert report[2][OTHER] == {"sent": 0, "received": 10_000}
    assert report[3] == {"train 0": {"sent": 0, "received": 7}}  # another peer is unaffected
    traffic.add(2, TensorKey("job", 4, 0, "embedding"), sent=5)  # a phase it has stays its own
    assert traffic.report()[2]["train 4"] == {"sent": 5, "received": 10}
