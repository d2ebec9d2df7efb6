"""Bytes on the wire, per party and per phase: what each algorithm costs in communication.

Every tensor message is counted at the size protobuf gives it (``ByteSize``: payload plus key
and header), as it is sent or received; TLS and HTTP/2 framing add a little on top (about
0.2 % measured for PSI, docs/explanation/psi.md). Phases are named after what the tensor is for:
``psi``, ``train <epoch>``, ``eval <epoch>``, ``infer`` and ``head``, so "MB per round" of an algorithm
is the ``train`` phases.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from vflcore.wire.names import EVAL_EMBEDDING, HEAD, is_psi_name
from vflcore.wire.tensors import TensorKey

MB = 1_000_000


def phase_of(key: TensorKey) -> str:
    if is_psi_name(key.name):
        return "psi"
    if key.name == EVAL_EMBEDDING:
        return f"eval {key.round}"
    if key.name.startswith("infer/"):
        return "infer"
    if key.name == HEAD:
        return "head"
    return f"train {key.round}"


#: Phases counted apart per peer. A chunk is counted as it arrives, before its key is checked, so
#: a peer could name a new round in every chunk; past this many phases (2,500 epochs of training
#: and evaluation), a peer's further bytes are counted under "other", and the map stops growing.
MAX_PHASES_PER_PEER = 5_000
OTHER = "other"


class Traffic:
    """Thread-safe byte counters: (peer party, phase) -> [sent, received], bounded per peer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: defaultdict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
        self._phases: defaultdict[int, int] = defaultdict(int)

    def add(self, party: int, key: TensorKey, *, sent: int = 0, received: int = 0) -> None:
        phase = phase_of(key)
        with self._lock:
            if (party, phase) not in self._bytes:
                if self._phases[party] >= MAX_PHASES_PER_PEER:
                    phase = OTHER
                else:
                    self._phases[party] += 1
            counts = self._bytes[(party, phase)]
            counts[0] += sent
            counts[1] += received

    def report(self) -> dict[int, dict[str, dict[str, int]]]:
        """{party: {phase: {"sent": bytes, "received": bytes}}}, phases in first-seen order."""
        with self._lock:
            out: dict[int, dict[str, dict[str, int]]] = {}
            for (party, phase), (sent, received) in self._bytes.items():
                out.setdefault(party, {})[phase] = {"sent": sent, "received": received}
            return out

    def phase_total(self, phase: str) -> int:
        """Bytes of one phase, both directions, over every party."""
        with self._lock:
            return sum(s + r for (_, p), (s, r) in self._bytes.items() if p == phase)


def summary_lines(report: dict[int, dict[str, dict[str, int]]], *, own: str) -> list[str]:
    """Human-readable lines: per party, MB sent and received per training round and in total."""
    lines = []
    for party, phases in sorted(report.items()):
        train = [v for p, v in phases.items() if p.startswith("train ")]
        total_sent = sum(v["sent"] for v in phases.values())
        total_received = sum(v["received"] for v in phases.values())
        per_round = sum(v["sent"] + v["received"] for v in train) / max(1, len(train)) / MB
        lines.append(
            f"wire, {own} <-> party {party}: {total_sent / MB:.2f} MB sent, {total_received / MB:.2f} MB received in "
            f"total; {per_round:.3f} MB per training round ({len(train)} rounds)"
        )
    return lines
