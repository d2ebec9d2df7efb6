"""Waiting for what a daemon, a thread or a peer will do: ``eventually``, the one wait of the tests.

A test cannot block on an event inside another process; it looks again until what it expects
holds, or a deadline passes. Every such wait in the tests, the test kit and the fuzz campaign
goes through ``eventually``, so each polls the same way and fails the same way: naming what it
waited for, after how long, and what the caller can add (the daemons' log tails, a file's lines).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


def eventually(
    condition: Callable[[], T | None],
    what: str,
    timeout: float = 120,
    *,
    every: float = 0.01,
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` every ``every`` seconds until it returns something true, and return that.

    Past ``timeout`` seconds, raise ``AssertionError`` naming ``what``, followed by ``explain()``
    if given. A condition may raise itself to end the wait early (a daemon that exited will never
    write the line). 10 ms suits a look at a file; a condition that makes an RPC costs the server
    and the caller about 2 ms of CPU each time (measured 2026-11-28), so such a wait passes
    ``every=0.05``.
    """
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(every)
    return found
