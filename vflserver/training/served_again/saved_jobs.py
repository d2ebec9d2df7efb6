"""What serving again reads of the job store: the finished and queued jobs, and whether each is served.

The store (``vflserver.jobs.store.JobStore``) sits on the floor above, the service's; this
package asks it through these protocols, as inference asks the active party through
``TrainedParty``, so that the training floor never imports the jobs floor. ``JobStore`` and
``JobRecord`` fit them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol


class SavedJob(Protocol):
    """One job as the store holds it: its id, its document, whether its model is served, when it ended."""

    @property
    def job_id(self) -> str: ...

    @property
    def document(self) -> Mapping[str, Any]: ...

    @property
    def served(self) -> bool: ...

    @property
    def ended_at(self) -> float | None: ...


class SavedJobs(Protocol):
    """The store's jobs by state, and the record of whether a job's model is served."""

    def list(self, states: Collection[str] = (), limit: int = 0) -> Sequence[SavedJob]:
        """Jobs newest submission first, only those in ``states`` if given."""
        ...

    def set_served(self, job_id: str, served: bool) -> None:
        """Record whether the job's model is being served for inference."""
        ...
