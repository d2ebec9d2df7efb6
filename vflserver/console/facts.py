"""What the console may show, gathered from the job store, the board, the served models and the run folder.

Everything here is an allowlist: each page reads named fields of the job's record, its events
and epochs, the ``wire_bytes`` and ``privacy`` blocks of the active party's ``summary.json``,
and what the directory knows of each party's daemon. No tensor, ID, feature value or label is
anywhere in those, and messages are shown with every file path outside the run folder cut to
its last part (``redact_paths``): an error that names a data file says which file, not where
the active party keeps it.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from vflserver.federation.board import JobBoard
from vflserver.inference.model_state import model_state
from vflserver.inference.registry import ModelRegistry
from vflserver.jobs.store import ENDED, EpochRecord, JobEvent, JobRecord, JobStore

#: An absolute POSIX path in a message: what ``redact_paths`` shortens.
_PATH = re.compile(r"(?<![\w.])/(?:[^\s'\"(),;:]+/)*[^\s'\"(),;:]*")
#: The states a job never leaves.
_FINAL = frozenset({"finished", "failed", "cancelled"})
#: Jobs shown on the jobs page, newest first.
JOBS_SHOWN = 200


def redact_paths(text: str, run_dir: Path) -> str:
    """``text`` with each absolute path outside ``run_dir`` replaced by ``…/<its last part>``."""
    root = str(run_dir.resolve())

    def shorten(match: re.Match[str]) -> str:
        path = match.group(0)
        if path == root or path.startswith(root + "/"):
            return path
        return "…/" + (path.rstrip("/").rsplit("/", 1)[-1] or "")

    return _PATH.sub(shorten, text)


@dataclass(frozen=True)
class Sources:
    """Where the console reads from: the running service's parts, handed over once at start."""

    store: JobStore
    board: JobBoard
    registry: ModelRegistry | None
    run_dir: Path
    version: str
    started_at: float
    #: Listener name -> address ("federation and control" -> "0.0.0.0:50051", ...), as bound.
    listeners: Callable[[], Mapping[str, str]]
    metrics_url: Callable[[], str | None] = lambda: None
    #: The phases of jobs that have ended, which cannot change: the jobs page reads each once.
    ended_phases: dict[str, list[Phase]] = field(default_factory=dict)


@dataclass(frozen=True)
class Phase:
    """Time a job spent in one state, in order of first entry."""

    state: str
    seconds: float


@dataclass(frozen=True)
class JobFacts:
    record: JobRecord
    events: list[JobEvent]
    epochs: list[EpochRecord]
    phases: list[Phase]
    #: Why the job failed, was cancelled or interrupted (its record's error); empty otherwise.
    error: str
    privacy: dict[str, Any]
    #: Party -> {"PSI" | "training" | "evaluation" | "inference": bytes sent and received by the
    #: active party to and from it}, from its summary.json (once the job has ended).
    wire_bytes: dict[str, dict[str, int]]
    served: list[tuple[str, str]]  # (model name, readiness in words)
    #: While the job is the open one and has not ended: PSI's streams, chunks done of how many.
    psi_progress: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: What its latest state change said, when that is not an error: why it is queued or waiting
    #: (a lost party, named), how far PSI got, how it finished.
    status: str = ""


@dataclass(frozen=True)
class PartyFacts:
    party: int
    online: bool
    seconds_since_seen: float | None
    client_version: str
    certificate_days_left: float | None
    #: Jobs not ended that name the party, for "expected".
    expected_by: list[str] = field(default_factory=list)


def jobs(sources: Sources) -> list[tuple[JobRecord, list[Phase]]]:
    """The newest jobs, each with the time spent in each of its phases."""
    found = []
    for record in sources.store.list(limit=JOBS_SHOWN):
        spent = sources.ended_phases.get(record.job_id)
        if spent is None:
            spent = phases(sources.store.events(record.job_id), record)
            if record.state in _FINAL:  # not "interrupted": that one is queued again at the next start
                sources.ended_phases[record.job_id] = spent
        found.append((record, spent))
    return found


def phases(events: Sequence[JobEvent], record: JobRecord) -> list[Phase]:
    """Seconds in each state, from the state events (a state entered twice adds up); the current one to now."""
    spent: dict[str, float] = {}
    changes = [(e.at, e.state) for e in events if e.kind == "state"]
    ends = [*changes[1:], (record.ended_at or time.time(), "")]
    for (at, state), (following, _) in zip(changes, ends, strict=True):
        spent[state] = spent.get(state, 0.0) + max(0.0, following - at)
    return [Phase(state, seconds) for state, seconds in spent.items()]


def job(sources: Sources, job_id: str) -> JobFacts:
    """One job's page; JobNotFound (from the store) for an unknown id."""
    record = sources.store.get(job_id)
    events = sources.store.events(job_id)
    summary = _summary(sources.run_dir, job_id)
    privacy = dict(record.document.get("privacy", {}))
    spent = summary.get("privacy", {}) if isinstance(summary.get("privacy"), dict) else {}
    for key in ("label_dp", "active_embedding"):
        if isinstance(spent.get(key), dict):
            privacy[key] = {k: v for k, v in spent[key].items() if isinstance(v, int | float | str) or v is None}
    wire = summary.get("wire_bytes", {})
    return JobFacts(
        record=record,
        events=events,
        epochs=sources.store.epochs(job_id),
        phases=phases(events, record),
        error=redact_paths(record.error, sources.run_dir),
        privacy=privacy,
        wire_bytes={str(p): _by_phase(d) for p, d in wire.items() if isinstance(d, dict)},
        served=_served(sources, job_id),
        psi_progress=_psi_progress(sources, record),
        status=redact_paths(_status(record, events), sources.run_dir),
    )


def _psi_progress(sources: Sources, record: JobRecord) -> dict[str, tuple[int, int]]:
    """The open job's PSI streams while it runs: the board keeps the last job's figures after it ended."""
    current = sources.board.current()
    if current is None or current.job.job_id != record.job_id or record.state in ENDED:
        return {}
    return dict(current.psi_progress)


#: ``summary.json``'s wire phases ("psi", "train 3", "eval 3", "infer") by the kind the console sums them into.
_PHASE_KINDS = {"psi": "PSI", "train": "training", "eval": "evaluation", "infer": "inference"}


def _by_phase(phases: Mapping[str, Any]) -> dict[str, int]:
    """One party's bytes, sent plus received, summed over the epochs into PSI, training, evaluation, inference."""
    found: dict[str, int] = {}
    for phase, counts in phases.items():
        kind = _PHASE_KINDS.get(str(phase).split(" ")[0], "other")
        if isinstance(counts, Mapping):
            total = sum(int(v) for v in counts.values() if isinstance(v, int | float))
        elif isinstance(counts, int | float):
            total = int(counts)
        else:
            continue
        found[kind] = found.get(kind, 0) + total
    return found


def _status(record: JobRecord, events: Sequence[JobEvent]) -> str:
    """The latest state change's message, unless it is the job's error (shown as that)."""
    if record.error:
        return ""
    said = [e.message for e in events if e.kind == "state"]
    return said[-1] if said else ""


def _summary(run_dir: Path, job_id: str) -> dict[str, Any]:
    path = run_dir / job_id / "party-1" / "summary.json"
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _served(sources: Sources, job_id: str) -> list[tuple[str, str]]:
    if sources.registry is None:
        return []
    found = []
    for entry in sources.registry.models():
        name = entry.servable.name
        if name == job_id or name.startswith(job_id + "-"):
            found.append((name, str(model_state(entry.servable))))
    return found


def parties(sources: Sources) -> list[PartyFacts]:
    """Every party the server has seen or a job not ended expects, with what is known of its daemon."""
    expected: dict[int, list[str]] = {}
    for record in sources.store.list(limit=JOBS_SHOWN):
        if record.ended_at is None:
            for party in record.document.get("job", {}).get("passive_parties", []) or []:
                if isinstance(party, int):
                    expected.setdefault(party, []).append(record.job_id)
    seen = {p.party: p for p in sources.board.directory.all()}
    now = time.time()
    found = []
    for party in sorted(set(expected) | set(seen)):
        known = seen.get(party)
        expires = None if known is None else known.certificate_expires
        found.append(
            PartyFacts(
                party=party,
                online=sources.board.connected(party),
                seconds_since_seen=None if known is None else max(0.0, now - known.last_seen),
                client_version="" if known is None else known.client_version,
                certificate_days_left=None if expires is None else (expires - now) / 86400,
                expected_by=expected.get(party, []),
            )
        )
    return found


@dataclass(frozen=True)
class ServerFacts:
    version: str
    uptime_s: float
    listeners: dict[str, str]
    run_dir_bytes: int
    disk_free_bytes: int
    metrics_url: str | None


def server(sources: Sources) -> ServerFacts:
    usage = shutil.disk_usage(sources.run_dir)
    return ServerFacts(
        version=sources.version,
        uptime_s=time.time() - sources.started_at,
        listeners=dict(sources.listeners()),
        run_dir_bytes=_folder_bytes(sources.run_dir),
        disk_free_bytes=usage.free,
        metrics_url=sources.metrics_url(),
    )


def service_version() -> str:
    """This package's installed version (``vfl-service``), or "unknown" when it runs from a source tree."""
    try:
        return metadata.version("vfl-service")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


#: How long the run folder's size is reused: walking a folder of many jobs' checkpoints every 2 s
#: (the server page's refresh) would cost the server more than the page is worth.
FOLDER_SIZE_TTL_S = 60.0
_sizes: dict[Path, tuple[float, int]] = {}


def _folder_bytes(folder: Path) -> int:
    """The bytes under ``folder``, walked at most once a ``FOLDER_SIZE_TTL_S``."""
    now = time.monotonic()
    cached = _sizes.get(folder)
    if cached is not None and now - cached[0] < FOLDER_SIZE_TTL_S:
        return cached[1]
    total = _walk_bytes(folder)
    _sizes[folder] = (now, total)
    return total


def _walk_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def finite(value: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


__all__ = [
    "JobFacts",
    "PartyFacts",
    "Phase",
    "ServerFacts",
    "Sources",
    "finite",
    "job",
    "jobs",
    "parties",
    "phases",
    "redact_paths",
    "server",
    "service_version",
]
