"""What a fuzz campaign records: every case's verdict, per target and per surface, and how to replay a failure.

A **target** is one input surface under one identity (``Control.Submit as operator``, ``files
read at submission``, ``the console as operator``); a **surface** groups targets by what they
reach (``federation``, ``psi``, ``files``, ...), so the report can say how many cases each got.

Every failure carries the Hypothesis seed and example count its target was driven with and its
index, and ``replay_command`` turns them into one command line that sends that target's cases
again, in the same order, up to the failing one.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import text_format
from google.protobuf.message import Message
from hypothesis import strategies as st

#: A campaign's per-step loss tolerance between an honest job and the reference (the same operations).
TOLERANCE = 1e-6


@dataclass
class Verdict:
    """What one case got back, and whether that is acceptable (``failure`` says why not)."""

    status: str
    failure: str | None = None


@dataclass
class Target:
    """One input surface under one identity, with what to send it."""

    label: str
    surface: str
    cases: st.SearchStrategy[Any]
    send: Callable[[Any], Verdict]


@dataclass(frozen=True)
class Drawn:
    """Where a case came from: its target was driven with ``seed`` for ``examples`` cases; it was case ``index``."""

    seed: int
    examples: int
    index: int


def replay_command(label: str, drawn: Drawn) -> str:
    """One command line that replays a target's cases up to the one ``drawn`` says, on a fresh service."""
    return (
        f"python -m bench.operations.fuzz --target {shlex.quote(label)} --seed {drawn.seed} "
        f"--cases {drawn.examples} --stop-at {drawn.index}"
    )


@dataclass
class Report:
    """Cases and statuses per target and surface, the failures, and the honest jobs' outcome."""

    cases: Counter[str] = field(default_factory=Counter)
    surfaces: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: The largest per-step loss difference of any honest job from the reference (inf: one did not finish).
    loss_difference: float = float("nan")
    #: The largest difference of any party's final weights of an honest job from the reference's.
    weight_difference: float = float("nan")
    honest_jobs: int = 0
    honest_running_at_end: bool = False
    #: The served federated model's predictions for known IDs, before and after the by-ID cases: equal?
    predictions_unchanged: bool | None = None
    crashed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.cases.values())

    def record(self, target: Target, verdict: Verdict, case: Any, drawn: Drawn) -> None:
        self.cases[target.label] += 1
        self.surfaces[target.label] = target.surface
        self.statuses.setdefault(target.label, Counter())[verdict.status] += 1
        if verdict.failure is not None and len(self.failures) < 200:
            self.failures.append(
                f"{target.label}: {verdict.failure}; case {_short(case)}; replay: {replay_command(target.label, drawn)}"
            )

    def per_surface(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for label, count in self.cases.items():
            found[self.surfaces[label]] += count
        return found

    def lines(self) -> list[str]:
        out = [f"{'target':<52} {'cases':>6}  statuses"]
        for label, count in self.cases.items():
            statuses = ", ".join(f"{s} {n}" for s, n in self.statuses[label].most_common())
            out.append(f"{label:<52} {count:>6}  {statuses}")
        out.append("cases per surface: " + ", ".join(f"{s} {n}" for s, n in sorted(self.per_surface().items())))
        return out


def _short(case: Any, limit: int = 300) -> str:
    parts = case if isinstance(case, list) else [case]
    text = " | ".join(
        text_format.MessageToString(p, as_one_line=True) if isinstance(p, Message) else repr(p) for p in parts
    )
    return text if len(text) <= limit else text[:limit] + "..."


def failed(report: Report) -> list[str]:
    """Every reason the campaign failed: bad answers, dead daemons, a disturbed honest job or served model."""
    reasons = list(report.failures)
    reasons += [f"{name} died" for name in report.crashed]
    if not report.loss_difference <= TOLERANCE:
        reasons.append(f"an honest job's per-step losses differ from the reference by {report.loss_difference:.3g}")
    if not report.weight_difference <= TOLERANCE:
        reasons.append(f"an honest job's final weights differ from the reference by {report.weight_difference:.3g}")
    if report.predictions_unchanged is False:
        reasons.append("the served federated model's predictions for known IDs changed during the by-ID cases")
    return reasons
