"""The queue's rule: which job starts next, which wait and for whom, and when waiting ends in failure.

The rule, as ``docs/reference/job-states.md`` ("The queue") states it for operators:

- One job at a time holds the passive parties: it waits for them to join, aligns and trains.
  Each party's daemon takes part in one job at a time, so two jobs that share a party could not
  run together anyway, and one job at a time keeps the active party's CPU for that job.
- When the runner is free it starts the oldest job, in submission order, whose passive parties
  are all connected. A job that names a party whose daemon is not connected keeps its place and
  says which party it waits for; younger jobs that do not need that party start meanwhile.
- A job paused for a lost party (``waiting``) does not hold the runner: it is parked, keeps its
  place in submission order, and resumes as soon as its parties are connected and the runner is
  free.
- A parked job fails once ``[server] party_timeout_s`` has passed since the loss (the moment
  the party's connection closed or it was last heard from) while a party it needs is still not
  connected. A queued job fails once a party it names has not been connected for the job's
  ``join_timeout_s`` while the job was queued.

Only the rule lives here, as plain functions of what the runner knows (tested in
``tests/unit/vflserver/jobs/test_scheduling.py``); ``vflserver.jobs.runner`` applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vflcore.errors import PartyLost


@dataclass(frozen=True)
class Candidate:
    """A job that may start: queued, or parked after a lost party. Candidates come oldest first."""

    job_id: str
    parties: tuple[int, ...]


@dataclass(frozen=True)
class Turn:
    """What the runner does now: ``start`` (or nothing), and the parties each other job waits for."""

    start: Candidate | None
    held: dict[str, tuple[int, ...]] = field(default_factory=dict)


def next_turn(candidates: Sequence[Candidate], connected: Callable[[int], bool]) -> Turn:
    """The oldest candidate whose parties are all connected; for every held one, the parties it lacks."""
    start: Candidate | None = None
    held: dict[str, tuple[int, ...]] = {}
    for candidate in candidates:
        missing = tuple(p for p in candidate.parties if not connected(p))
        if missing:
            held[candidate.job_id] = missing
        elif start is None:
            start = candidate
    return Turn(start, held)


def loss_deadline(lost: PartyLost, limit_s: float, noticed_at: float) -> float:
    """When a job paused by ``lost`` fails if the party is not back: ``limit_s`` after the loss itself.

    Not after ``noticed_at``, when the server noticed it: that may be a grace period (5 s for a
    closed stream) or ``heartbeat_timeout_s`` later, and the operator's limit counts from the loss.
    """
    since = noticed_at if lost.since is None else min(lost.since, noticed_at)
    return since + limit_s


def absent_since(queued_at: float, last_seen: float | None) -> float:
    """Since when a queued job has waited for a party: its queueing, or the party's last sign of life if later."""
    return queued_at if last_seen is None else max(queued_at, last_seen)


def waiting_message(missing: Sequence[int]) -> str:
    """A queued job's message while parties it names are not connected.

    Not "waiting for party N", the words of a job paused for a lost party: an operator (or a
    script) that looks for a pause must not find a job that merely has not started.
    """
    if len(missing) == 1:
        party = missing[0]
        return f"party {party} is not connected; the job starts once it is, and jobs that do not need it run meanwhile"
    return (
        f"parties {list(missing)} are not connected; the job starts once they are, and jobs that do not need them "
        "run meanwhile"
    )


#: A queued job's message once the parties it waited for are connected again.
CONNECTED_MESSAGE = "its parties are connected; it starts once the runner is free"
