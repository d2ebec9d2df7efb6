"""Work handed to the passive parties: each task goes into a party's queue, which its Subscribe stream reads.

Every task gets a fresh id, so that a party can tell a task of this run from one left over from
an earlier attempt. ``Finish`` is the last task of a job for a party: its stream ends after it,
and that close is the job's routine end, not a party that went away (``liveness.leave``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from vflcore.work_items import Finish, Task
from vflserver.federation.membership import Membership


class TaskDispatch:
    """Queues tasks for every passive party of a job, or for some."""

    def __init__(self, members: Membership) -> None:
        self.members = members
        self._task_ids = itertools.count(1)

    def dispatch(self, make_task: Callable[[int], Task], *, parties: Iterable[int] | None = None) -> None:
        """Queue the same task (with a fresh id) for every passive party, or only for ``parties``."""
        members = self.members.all() if parties is None else [self.members.member(p) for p in parties]
        for member in members:
            member.tasks.put(make_task(next(self._task_ids)))

    def finish(self, success: bool, message: str, *, rejoin: bool = False) -> None:
        """Tell every party the job is over (with ``rejoin``: paused); each Subscribe stream ends after this task."""
        with self.members.lock:
            for member in self.members.all():
                member.released = True
        self.dispatch(lambda tid: Finish(tid, success, message, rejoin))
