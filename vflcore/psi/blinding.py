"""X25519 blinding for ECDH-PSI: per-job secret keys, serial and multi-process batch blinding.

ECDH-PSI in one paragraph: party A sends ``a·H(x)`` for its IDs, party B sends ``b·H(y)`` for its
own; each multiplies what it received by its own key, and ``a·b·H(x) == b·a·H(y)`` exactly when
``x == y``, because X25519 scalar multiplication commutes. Keys are fresh per job, so blinded
values from different jobs cannot be linked. A key is written to disk only while its PSI runs,
in the party's own 0600 progress file (``vflcore.psi.progress``), so that a party that restarts
mid-exchange can resume it; the file is deleted when PSI ends.

Scalar multiplication is OpenSSL's X25519 through ``cryptography``: ``exchange()`` of a private
key with a "public key" that is really the point to blind. X25519 clamps the scalar to a multiple
of 8 with bit 254 set, which clears the cofactor of Elligator 2 outputs (see ``hash_to_curve``)
and makes ``x -> k·x`` a bijection on the prime-order subgroup: distinct IDs stay distinct.

Low-order inputs. ``exchange`` refuses a point whose product is the neutral element (all-zero
output, RFC 7748 §6.1) with ValueError. For our own hashed IDs this needs ``hash_to_field`` to hit
one of a handful of field elements out of 2^255, which does not happen; for a point received from
a peer it means a malformed or malicious message. Either way :func:`blind` raises :class:`PsiError`
naming the index, and the job should stop; silently dropping the item would shift every later one.

Why processes: one X25519 multiplication is tens of µs of C code that holds the GIL, so threads
do not scale; :class:`ParallelBlinder` uses a process pool. The pool uses the ``forkserver`` (or
``spawn``) start method, never ``fork``: forking a process that already runs gRPC threads can
deadlock or crash the child, and a daemon's gRPC server or channel exists before PSI starts. The
key reaches the workers as raw bytes through the pool initializer, that is through the pipe that
starts each worker: memory to memory, never a file, never a log.

Non-canonical encodings from a peer (u >= p, or bit 255 set) need no check: X25519 reduces them
as RFC 7748 requires, so they blind to the same value as the canonical u, and its output is always
canonical. Points on the twist need none either: Curve25519 is twist-secure and the clamped scalar
kills the twist's small subgroup, so ``k·T`` tells the sender nothing usable about ``k``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from types import TracebackType
from typing import Final, NoReturn, Self

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vflcore.errors import PsiError
from vflcore.psi.hash_to_curve import U_BYTES, encode_many
from vflcore.psi.x25519 import current, multibuffer_for

__all__ = [
    "DEFAULT_CHUNK",
    "BlindingKey",
    "ParallelBlinder",
    "Progress",
    "PsiError",
    "blind",
    "hash_and_blind",
]

DEFAULT_CHUNK: Final = 16_384  # items per worker task: ~0.5 s of work, small enough for progress
Progress = Callable[[int, int], None]  # progress(done, total), called in the caller's process


class BlindingKey:
    """A per-job X25519 secret scalar. Create it with :meth:`generate`.

    ``repr``/``str`` are redacted, and pickling (hence ``copy``, ``multiprocessing`` arguments,
    accidental caching to disk) raises TypeError. The secret lives in OpenSSL-owned memory and
    is freed with the object; drop the key when the job ends. The one place it is written is
    the party's PSI progress file, on purpose (``vflcore.psi.progress``), read back with
    :meth:`from_raw`.
    """

    __slots__ = ("_private",)

    def __init__(self, _private: X25519PrivateKey) -> None:
        self._private = _private

    @classmethod
    def generate(cls) -> BlindingKey:
        """A fresh uniformly random key from the OS CSPRNG (through OpenSSL)."""
        return cls(X25519PrivateKey.generate())

    @classmethod
    def from_raw(cls, secret: bytes) -> BlindingKey:
        """The key whose 32 secret bytes ``_raw`` gave: a PSI resumed after a restart (``vflcore.psi.progress``)."""
        if len(secret) != 32:
            raise ValueError(f"an X25519 secret is 32 bytes, got {len(secret)}")
        return cls(X25519PrivateKey.from_private_bytes(secret))

    def __repr__(self) -> str:
        return "BlindingKey(<redacted>)"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a BlindingKey cannot be pickled or copied: the PSI secret stays in this process's memory"
            " (ParallelBlinder hands its workers the raw bytes through the pool initializer instead)"
        )

    def _raw(self) -> bytes:
        """The 32 secret bytes, only for starting ParallelBlinder workers and the progress file. Never log them."""
        return self._private.private_bytes_raw()


def _blind_with(private: X25519PrivateKey, points: Sequence[bytes], offset: int) -> list[bytes]:
    """k·u for each u-coordinate; ``offset`` is added to indices in error messages."""
    load = X25519PublicKey.from_public_bytes
    exchange = private.exchange
    out: list[bytes] = []
    append = out.append
    for i, u in enumerate(points):
        try:
            append(exchange(load(u)))
        except (ValueError, TypeError):
            _raise_bad_point(offset + i, u)
    return out


def blind_with_key(private: X25519PrivateKey, points: Sequence[bytes], offset: int, setting: str) -> bytes:
    """k·u for each u-coordinate, concatenated, through the X25519 that ``setting`` comes to here
    (``vflcore.psi.x25519``): the same bytes and the same ``PsiError`` either way."""
    fast = multibuffer_for(setting, points)
    if fast is None:
        return b"".join(_blind_with(private, points, offset))
    try:
        return fast.exchange_packed(private.private_bytes_raw(), b"".join(points))
    except PsiError as exc:
        assert exc.index is not None
        _raise_bad_point(offset + exc.index, points[exc.index])


def _raise_bad_point(index: int, u: object) -> NoReturn:
    if not isinstance(u, bytes):
        raise PsiError(f"point {index} is a {type(u).__name__}, not bytes", index) from None
    if len(u) != U_BYTES:
        raise PsiError(f"point {index} is {len(u)} bytes long, not {U_BYTES}", index) from None
    raise PsiError(
        f"point {index} is a low-order point (its product is the neutral element): "
        "a malformed or malicious PSI message",
        index,
    ) from None


def blind(points: Sequence[bytes], key: BlindingKey) -> list[bytes]:
    """``key·u`` (X25519) for every 32-byte little-endian u-coordinate, in order.

    Raises :class:`PsiError` for an item that is not 32 bytes or is a low-order point.
    """
    return _split(blind_with_key(key._private, points, 0, current()))


def hash_and_blind(ids: Sequence[bytes], dst: bytes, key: BlindingKey) -> list[bytes]:
    """``key·H(id)`` for every ID, in order, in this process (see :class:`ParallelBlinder`)."""
    return _split(blind_with_key(key._private, encode_many(ids, dst), 0, current()))


# --- worker side: these run in the pool's processes ---------------------------------------------

_worker_key: X25519PrivateKey | None = None
_worker_x25519 = "auto"  # the parent's [psi] x25519, resolved in the worker


def _init_worker(secret: bytes, x25519: str = "auto") -> None:
    global _worker_key, _worker_x25519
    _worker_key = X25519PrivateKey.from_private_bytes(secret)
    _worker_x25519 = x25519


def _task_ready() -> bool:
    return _worker_key is not None


def _task_blind(offset: int, points: Sequence[bytes]) -> bytes:
    assert _worker_key is not None, "worker was started without a key"
    # One bytes object back instead of thousands: pickling cost is per object.
    return blind_with_key(_worker_key, points, offset, _worker_x25519)


def _task_hash_and_blind(offset: int, ids: Sequence[bytes], dst: bytes) -> bytes:
    assert _worker_key is not None, "worker was started without a key"
    return blind_with_key(_worker_key, encode_many(ids, dst), offset, _worker_x25519)


# --- parent side ---------------------------------------------------------------------------------


class OpenedInWith:
    """A blinder's ``with``: ``open`` on entry, ``close`` on exit (each blinder says what they do)."""

    def open(self) -> None:
        """Make the blinder ready (start workers, connect); nothing by default."""

    def close(self) -> None:
        """Release what ``open`` took; nothing by default."""

    def abandon(self) -> None:
        """Release what ``open`` took without waiting for work in progress, whose results nobody
        wants any more; ``close`` by default."""
        self.close()

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:  # a failure, or the party stopping: the chunks being blinded are not needed
            self.abandon()


class ParallelBlinder(OpenedInWith):
    """Blind (or hash and blind) large batches on a pool of worker processes, order preserved.

    Use as a context manager; the pool starts on entry and is shut down on exit::

        with ParallelBlinder(key, workers=2) as pool:
            mine = pool.hash_and_blind(ids, make_dst(job_id), progress=report)
            theirs_twice = pool.blind(theirs_once)

    ``start_method`` is ``"forkserver"`` (default) or ``"spawn"``; both start workers from a
    clean single-threaded process, so a pool may be opened while gRPC threads run. Start-up costs
    a fresh interpreter per worker (spawn) or one per process lifetime plus a fork per worker
    (forkserver): measured in ``bench/psi/primitives.py``. Keep one pool for a whole PSI job.
    """

    def __init__(
        self,
        key: BlindingKey,
        workers: int | None = None,
        *,
        chunk_size: int = DEFAULT_CHUNK,
        start_method: str = "forkserver",
    ) -> None:
        if workers is None:
            workers = os.cpu_count() or 1
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(
                f"start_method must be 'forkserver' or 'spawn' (fork is unsafe with gRPC), not {start_method!r}"
            )
        self.workers = workers
        self.chunk_size = chunk_size
        self.start_method = start_method
        self._key = key
        self._pool: ProcessPoolExecutor | None = None
        #: Every chunk submitted and not yet collected, for ``abandon`` to fail (several threads submit).
        self._in_flight: set[Future[bytes]] = set()
        self._in_flight_lock = threading.Lock()

    def __repr__(self) -> str:
        state = "open" if self._pool is not None else "closed"
        return f"ParallelBlinder(workers={self.workers}, chunk_size={self.chunk_size}, {self.start_method}, {state})"

    def open(self) -> None:
        """Start the worker processes (``__enter__`` does this)."""
        if self._pool is not None:
            return
        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            # Workers fork from the server with these already imported (cryptography, gmpy2), which
            # saves each worker the imports. Only takes effect if the server is not running yet.
            context.set_forkserver_preload([__name__])
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(self._key._raw(), current()),
        )
        # With forkserver/spawn the executor starts a worker per submit that finds none idle, so
        # one no-op task per worker starts them all now: start-up cost and failures show up here,
        # not in the first batch.
        try:
            with _main_module_hidden():
                started = [pool.submit(_task_ready) for _ in range(self.workers)]
            for ready in started:
                if not ready.result():
                    raise RuntimeError("a PSI worker started without its key")
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        self._pool = pool

    def close(self) -> None:
        """Stop the workers; pending tasks are cancelled. The key dies with the processes."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def abandon(self) -> None:
        """Kill the workers now (SIGKILL), rather than let each finish the chunk it is blinding.

        A worker holds only the key and a chunk of IDs or points, and writes nothing: nothing is
        lost. Waiting was what made a party that was stopped in the middle of PSI take 4 to 6 s to
        exit (100,000 IDs; longer with more), the rest of the chunk in every worker. The tasks
        waiting on them fail with ``BrokenProcessPool``, which ends the threads that submitted them.

        Nothing here waits for the pool: a worker killed while it wrote its result leaves half a
        message in the result pipe, and the pool's manager thread then waits in ``recv`` for the
        rest, for ever (CPython's ProcessPoolExecutor; seen once in CI with the workers frozen).
        A stopping ``vfl-client`` exits without joining it (``daemon.leave``).
        """
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # ProcessPoolExecutor.terminate_workers is Python 3.14's; before it, its own process table
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()  # SIGKILL: a stopped (SIGSTOP) worker would keep a SIGTERM pending
        pool.shutdown(wait=False, cancel_futures=True)
        # A chunk whose worker was killed may never be completed by the pool: fail it here.
        with self._in_flight_lock:
            orphans, self._in_flight = self._in_flight, set()
        for future in orphans:
            if not future.cancel() and not future.done():
                with contextlib.suppress(InvalidStateError):  # the pool's manager may fail it first
                    future.set_exception(BrokenProcessPool("the PSI workers were stopped: the party is stopping"))

    def blind(self, points: Sequence[bytes], *, progress: Progress | None = None) -> list[bytes]:
        """``key·u`` for every u-coordinate, in order; raises :class:`PsiError` like :func:`blind`."""
        return _split(self.blind_packed(points, progress=progress))

    def hash_and_blind(self, ids: Sequence[bytes], dst: bytes, *, progress: Progress | None = None) -> list[bytes]:
        """``key·H(id)`` for every ID, in order: ``encode_many`` then ``blind``, on the workers."""
        return _split(self.hash_and_blind_packed(ids, dst, progress=progress))

    def blind_packed(self, points: Sequence[bytes], *, progress: Progress | None = None) -> bytes:
        """As :meth:`blind`, but the results concatenated: 32 bytes per item, no per-item objects.

        ``np.frombuffer(out, np.uint8).reshape(-1, 32)`` views it as an array; at 1M items it is
        32 MB, against ~90 MB for a list of 1M bytes objects.
        """
        return self._run(points, lambda pool, off, chunk: pool.submit(_task_blind, off, chunk), progress)

    def hash_and_blind_packed(self, ids: Sequence[bytes], dst: bytes, *, progress: Progress | None = None) -> bytes:
        """As :meth:`hash_and_blind`, but the results concatenated (see :meth:`blind_packed`)."""
        dst = bytes(dst)
        return self._run(ids, lambda pool, off, chunk: pool.submit(_task_hash_and_blind, off, chunk, dst), progress)

    def _run(
        self,
        items: Sequence[bytes],
        submit: Callable[[ProcessPoolExecutor, int, Sequence[bytes]], Future[bytes]],
        progress: Progress | None,
    ) -> bytes:
        pool = self._pool
        if pool is None:
            raise RuntimeError("ParallelBlinder is not open: use it as a context manager")
        total = len(items)
        step = self.chunk_size
        futures = {submit(pool, start, items[start : start + step]): start for start in range(0, total, step)}
        with self._in_flight_lock:
            self._in_flight.update(futures)
        blobs: dict[int, bytes] = {}
        done = 0
        try:
            for future in as_completed(futures):
                start = futures[future]
                blobs[start] = future.result()
                done += min(step, total - start)
                if progress is not None:
                    progress(done, total)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            with self._in_flight_lock:
                self._in_flight.difference_update(futures)
        return b"".join(blobs[start] for start in range(0, total, step))


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start pool workers without each of them re-running the parent's ``__main__``.

    A forkserver/spawn worker first re-imports the parent's main module (found through its
    ``__file__`` or ``__spec__``) so that objects defined there can be unpickled. In the daemons
    that is the ``vfl-server``/``vfl-client`` console script, hence torch, grpc and the whole
    service: measured 3.1 s of CPU and ~290 MiB of RSS per worker, 3.3 s before the pool was
    ready. The tasks are module-level functions of this module and need nothing from it, so the
    main module's file and spec are hidden while the workers are launched, and put back at once.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, object] = {n: main.__dict__[n] for n in ("__file__", "__spec__") if n in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _split(packed: bytes) -> list[bytes]:
    return [packed[i : i + U_BYTES] for i in range(0, len(packed), U_BYTES)]


class SerialBlinder(OpenedInWith):
    """The :class:`ParallelBlinder` interface in this process: for small sets, where starting
    worker processes (each importing the caller's main module) costs more than the arithmetic."""

    def __init__(self, key: BlindingKey) -> None:
        self._key = key

    def blind_packed(self, points: Sequence[bytes], *, progress: Progress | None = None) -> bytes:
        return blind_with_key(self._key._private, points, 0, current())

    def hash_and_blind_packed(self, ids: Sequence[bytes], dst: bytes, *, progress: Progress | None = None) -> bytes:
        return blind_with_key(self._key._private, encode_many(ids, dst), 0, current())


#: Below this many items a PSI run blinds in-process: worker start-up would dominate.
SERIAL_BELOW: Final = 50_000


def blinder_for(count: int, key: BlindingKey, workers: int | None = None) -> ParallelBlinder | SerialBlinder:
    """A process pool for large sets, the serial path for small ones (or when ``workers == 1``)."""
    if count < SERIAL_BELOW or workers == 1:
        return SerialBlinder(key)
    return ParallelBlinder(key, workers)
