"""Keep glibc from returning large freed buffers to the kernel between training steps.

Every step moves tensors of a few hundred KB (a 1,024 x 60 float32 embedding is 240 KB). By
default glibc serves allocations that large with a fresh ``mmap`` and unmaps them on free, so
every step pays page faults to zero-fill new pages, in the gRPC message buffers, the tensor
codec and torch's own activations alike. On this project's 2-core machine that was about a
third of the transport's CPU time per step (shared/BRIEF.md, "measured facts": building a 10 MB
message took 13-18 ms, and about 1 ms with these thresholds; ``make bench-overhead`` measures
the transport as a whole). Raising the mmap and trim thresholds keeps freed memory in
the heap for reuse. It is what ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` do, set
from inside the process so a user need not export them.

The cost is that a process's resident size stays near its peak instead of shrinking after a
large phase (PSI, say); a daemon runs one job, so that is the right trade.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

# mallopt parameter numbers from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Allocations below this come from the heap and are reused; glibc caps the mmap threshold at 32 MiB.
KEEP_BELOW_BYTES = 32 * 1024 * 1024
#: Free heap memory up to this size is kept instead of trimmed back to the kernel.
TRIM_ABOVE_BYTES = 1 << 30


def return_freed_memory() -> bool:
    """Give the kernel back the free pages inside glibc's heaps (``malloc_trim(0)``); False off glibc.

    ``keep_freed_memory`` keeps freed buffers for reuse, which suits the steady step loop. A phase
    that allocates and frees many large buffers once (evaluating or scoring a million rows a block
    at a time, reading a table) leaves them scattered over every thread's heap instead: at 10M
    rows, evaluating 2M held-out rows grew the active party by about 0.5 GB that no later step
    used. Called after each such block, this keeps the peak at one block's worth. It walks the
    heaps' free lists (about a millisecond), so it is for block boundaries, not training steps.
    """
    libc = _libc()
    if libc is None:
        return False
    try:
        trim = libc.malloc_trim
    except AttributeError:
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Tune glibc malloc for reuse; returns False (and changes nothing) off glibc or if the user set it.

    An explicit ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the environment wins.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    libc = _libc()
    try:
        mallopt = libc.mallopt if libc is not None else None
    except AttributeError:  # not glibc (musl, macOS)
        return False
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, KEEP_BELOW_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_ABOVE_BYTES))
