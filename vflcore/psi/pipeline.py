"""Keeping a party's PSI cores busy: chunks computed ahead of the stream that sends them, and streams side by side.

A party of an ECDH-PSI exchange has two streams at once: it blinds its own chunks for the peer,
and it blinds the peer's chunks a second time. Run one after the other, or a chunk at a time,
and its cores idle whenever it sends, receives or waits for the peer; ``make bench-psi-10m``
measures the time against the floor of the curve arithmetic alone. So each stream computes a
few chunks ahead (``ahead``), and a party runs its streams at once (``side_by_side``), all
feeding one blinder (a process pool, whose queue keeps every worker busy).

Threads suffice here: the threads only wait (on the blinder's workers, on gRPC, on the
mailbox), and each runs in a copy of the caller's context, so its log lines keep the job's
bound fields.
"""

from __future__ import annotations

import contextvars
import functools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import TypeVar

from vflcore.errors import ServerUnavailable
from vflcore.memory import return_freed_memory

__all__ = ["ahead", "each_ahead", "side_by_side"]

T = TypeVar("T")


def ahead(tasks: Iterable[Callable[[], T]], depth: int) -> Iterator[T]:
    """Each task's result, in order, with up to ``depth`` tasks running at once on threads.

    A task is started only when fewer than ``depth`` results are pending, so at most ``depth``
    chunks are in memory. Each chunk's lists of points are freed on whichever thread's heap
    made them, and ``keep_freed_memory`` keeps freed heap memory: with more workers and cores,
    more heaps each keep a chunk's worth (issue 36: 2.2 GiB per party at 8
    workers on 16 cores). So the freed pages go back to the kernel after each result
    (``return_freed_memory``, about a millisecond against seconds of arithmetic a chunk).

    Leaving the loop early abandons the pending tasks without waiting for them (they may be
    blocked on a peer that is gone). Each runs on a daemon thread of its own (``_started``), not
    a ``ThreadPoolExecutor``'s: the interpreter joins those at exit, so one abandoned task
    blocked on a peer held a stopping daemon past its stop deadline (issue 36).
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    pending: deque[Future[T]] = deque()
    try:
        for task in tasks:
            pending.append(_started(task))
            if len(pending) >= depth:
                yield pending.popleft().result()
                return_freed_memory()
        while pending:
            yield pending.popleft().result()
            return_freed_memory()
    finally:
        for future in pending:
            future.cancel()  # a task not yet begun never begins; a running one is left to end


def _started(task: Callable[[], T]) -> Future[T]:
    """``task`` running on a daemon thread, in a copy of the caller's context; its future."""
    future: Future[T] = Future()
    context = contextvars.copy_context()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = context.run(task)
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)

    threading.Thread(target=run, name="psi-ahead", daemon=True).start()
    return future


def each_ahead(work: Callable[[int], T], chunks: Sequence[int], depth: int) -> Iterator[tuple[int, T]]:
    """(chunk, ``work(chunk)``) for each chunk in order, computed ``depth`` ahead (``ahead``)."""
    return zip(chunks, ahead((functools.partial(work, chunk) for chunk in chunks), depth), strict=True)


#: How often ``side_by_side`` looks at its ``abandon`` event while the streams run.
_ABANDON_POLL_S = 0.05


def side_by_side(
    streams: dict[str, Callable[[], None]],
    stop: threading.Event,
    *,
    grace_s: float = 5.0,
    abandon: threading.Event | None = None,
) -> None:
    """Run every stream on its own thread until all end; the first failure is raised.

    When one stream fails, ``stop`` is set, so that the others (which check it between chunks
    and while they wait) end too; they get ``grace_s`` to do so before the failure is raised
    regardless. A stream blocked on a remote call that cannot see ``stop`` is left behind: it
    ends when that call fails, which the failure reported by the caller brings about.

    ``abandon`` (the daemon is stopping: SIGTERM closed its connection) raises
    ``ServerUnavailable`` at once, ``stop`` set, without waiting for the streams: each would finish the chunk it is
    computing first, seconds at a million IDs, only to find the connection gone.
    """
    outcomes: queue.Queue[tuple[str, BaseException | None]] = queue.Queue()

    def run(name: str, stream: Callable[[], None]) -> None:
        try:
            stream()
        except BaseException as exc:
            outcomes.put((name, exc))
        else:
            outcomes.put((name, None))

    for name, stream in streams.items():
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(run, name, stream), name=f"psi-{name}", daemon=True).start()
    first: BaseException | None = None
    deadline = 0.0
    running = len(streams)
    while running:
        if abandon is not None and abandon.is_set():
            stop.set()
            raise ServerUnavailable("the connection was closed: this party is stopping")
        wait = None if first is None else max(0.0, deadline - time.monotonic())
        if abandon is not None:
            wait = _ABANDON_POLL_S if wait is None else min(wait, _ABANDON_POLL_S)
        try:
            _, error = outcomes.get(timeout=wait)
        except queue.Empty:
            if first is None or time.monotonic() < deadline:
                continue
            break  # the others did not end in time: raise the failure anyway
        running -= 1
        if error is not None and first is None:
            first, deadline = error, time.monotonic() + grace_s
            stop.set()
    if first is not None:
        raise first
