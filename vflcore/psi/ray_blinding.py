"""PSI's hashing and blinding as Ray tasks on the party's own cluster: ``RayBlinder``, and ``blinder_on``.

``RayBlinder`` has the interface of ``blinding.ParallelBlinder`` (a context manager with
``hash_and_blind_packed`` and ``blind_packed``), so PSI's two halves take whichever
``blinder_on`` gives them for the party's ``[compute] engine``. The ID set is cut into chunks of
``chunk_size`` items; each chunk is one Ray task running the same arithmetic as a pool worker
(``encode_many`` then X25519 through ``blinding.blind_packed``), and the results are joined in
chunk order, so the output is byte for byte what ``SerialBlinder`` computes with the same key.

The trust boundary. The private scalar must never leave the party, and it does not: it crosses
between the party's own nodes only. ``BlindingKey`` refuses pickling on purpose, so the 32 raw
secret bytes are handed to each task explicitly, as an argument, exactly as ``ParallelBlinder``
hands them to its workers through the pool initializer. A Ray cluster the party runs for itself
(its machines, its network, its operators) is inside the party, as its own worker processes are.
Two details keep the secret out of places a local pool never puts it:

- It is passed by value, not with ``ray.put``. Ray inlines an argument this small into the task's
  specification, which lives in memory only (the driver keeps it while the task may be retried,
  the worker while it runs); an object made with ``ray.put`` lives in the cluster's object store,
  which may spill it to disk under memory pressure. Nothing here writes the secret anywhere.
- Each task rebuilds the X25519 key from the bytes, uses it for one chunk and drops it.

Ray's own traffic between nodes is gRPC without TLS unless the cluster enables it (Ray's
``RAY_USE_TLS``); a party whose nodes talk over a network it does not trust turns that on. What
crosses to the other party is unchanged: blinded points only, sent by PSI's halves as today.
The IDs themselves go to the workers too (a chunk over 100 KiB travels through the object store);
they are the party's own data on the party's own machines (``docs/explanation/scale.md``).

Failures. A worker that dies mid-task (a node lost, a process killed) is Ray's to handle: each
task is retried up to ``max_retries`` times, and since a chunk's result depends only on its
inputs, a retried chunk gives the same bytes. A malformed point still raises ``PsiError`` naming
its index, as the local blinders do; it is not retried (the same input fails the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from vflcore.errors import JobAborted, PsiError
from vflcore.psi.blinding import (
    DEFAULT_CHUNK,
    BlindingKey,
    OpenedInWith,
    ParallelBlinder,
    Progress,
    SerialBlinder,
    blind_with_key,
    blinder_for,
)
from vflcore.psi.hash_to_curve import encode_many
from vflcore.psi.x25519 import current
from vflcore.runtime.compute import ComputeEngine, connect

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["DEFAULT_RETRIES", "RayBlinder", "blinder_on"]

#: Retries of a chunk whose worker died (Ray's ``max_retries``); a chunk is a fraction of a second.
DEFAULT_RETRIES: Final = 3

#: What one chunk runs as a Ray task: (secret, offset of its first item, items, [dst,] x25519) -> packed
#: points. ``x25519`` is the driver's ``[psi] x25519``, resolved on the node that runs the task: a node
#: with AVX-512 IFMA takes the multi-buffer path, another OpenSSL's, with the same bytes.
HashTask = Callable[[bytes, int, Sequence[bytes], bytes, str], bytes]
BlindTask = Callable[[bytes, int, Sequence[bytes], str], bytes]


def hash_and_blind_chunk(secret: bytes, offset: int, ids: Sequence[bytes], dst: bytes, x25519: str = "auto") -> bytes:
    """``k·H(id)`` for one chunk, packed: the task ``RayBlinder.hash_and_blind_packed`` runs per chunk."""
    return blind_with_key(X25519PrivateKey.from_private_bytes(secret), encode_many(ids, dst), offset, x25519)


def blind_chunk(secret: bytes, offset: int, points: Sequence[bytes], x25519: str = "auto") -> bytes:
    """``k·u`` for one chunk of a peer's points, packed: the task ``RayBlinder.blind_packed`` runs per chunk."""
    return blind_with_key(X25519PrivateKey.from_private_bytes(secret), points, offset, x25519)


class RayBlinder(OpenedInWith):
    """Blind (or hash and blind) large batches as Ray tasks on the party's cluster, order preserved.

    Connects this process to the cluster (``vflcore.runtime.compute.connect``) on entry if it is
    not connected yet. At most ``in_flight`` chunks are submitted at once (default: two per CPU of
    the cluster), so a 10M-ID set never sits in the object store whole.

    ``hash_and_blind_chunk`` and ``blind_chunk`` are the functions Ray runs per chunk: module
    functions, which a worker imports by name, so every node of the cluster needs this package
    installed (the same version as the driver). The tests wrap one to kill its worker mid-task.
    """

    def __init__(
        self,
        key: BlindingKey,
        engine: ComputeEngine,
        *,
        chunk_size: int = DEFAULT_CHUNK,
        max_retries: int = DEFAULT_RETRIES,
        in_flight: int | None = None,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        if in_flight is not None and in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self.engine = engine
        self.chunk_size = chunk_size
        self.max_retries = max_retries
        self.in_flight = in_flight
        self.hash_and_blind_chunk: HashTask = hash_and_blind_chunk
        self.blind_chunk: BlindTask = blind_chunk
        self._key = key
        self._secret: bytes | None = None
        self._ray: ModuleType | None = None

    def __repr__(self) -> str:
        state = "open" if self._secret is not None else "closed"
        return f"RayBlinder({self.engine.describe()}, chunk_size={self.chunk_size}, {state})"

    def open(self) -> None:
        """Connect to the cluster (``__enter__`` does this) and take the key's raw bytes for the tasks."""
        self._ray = connect(self.engine)
        if self.in_flight is None:
            self.in_flight = 2 * max(1, int(self._ray.cluster_resources().get("CPU", 1)))
        self._secret = self._key._raw()

    def close(self) -> None:
        """Forget the raw secret; the tasks' copies went with the tasks. The Ray connection stays."""
        self._secret = None

    def hash_and_blind_packed(self, ids: Sequence[bytes], dst: bytes, *, progress: Progress | None = None) -> bytes:
        """``key·H(id)`` for every ID, concatenated in order (see ``ParallelBlinder.hash_and_blind_packed``)."""
        dst, x25519 = bytes(dst), current()
        task = self._remote(self.hash_and_blind_chunk)
        return self._run(ids, lambda secret, start, chunk: task.remote(secret, start, chunk, dst, x25519), progress)

    def blind_packed(self, points: Sequence[bytes], *, progress: Progress | None = None) -> bytes:
        """``key·u`` for every u-coordinate, concatenated in order; PsiError names a bad point's index."""
        task, x25519 = self._remote(self.blind_chunk), current()
        return self._run(points, lambda secret, start, chunk: task.remote(secret, start, chunk, x25519), progress)

    def _remote(self, function: Callable[..., bytes]) -> Any:
        if self._ray is None or self._secret is None:
            raise RuntimeError("RayBlinder is not open: use it as a context manager")
        return self._ray.remote(function).options(num_cpus=1, max_retries=self.max_retries)

    def _run(
        self,
        items: Sequence[bytes],
        submit: Callable[[bytes, int, Sequence[bytes]], ObjectRef[bytes]],
        progress: Progress | None,
    ) -> bytes:
        ray, secret, window = self._ray, self._secret, self.in_flight
        assert ray is not None and secret is not None and window is not None
        total, step = len(items), self.chunk_size
        starts = iter(range(0, total, step))
        pending: dict[ObjectRef[bytes], int] = {}
        blobs: dict[int, bytes] = {}
        done = 0

        def top_up() -> None:
            while len(pending) < window and (start := next(starts, None)) is not None:
                pending[submit(secret, start, items[start : start + step])] = start

        try:
            top_up()
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    start = pending.pop(ref)
                    blobs[start] = self._result(ray, ref, start, min(start + step, total))
                    done += min(step, total - start)
                    if progress is not None:
                        progress(done, total)
                top_up()
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
        return b"".join(blobs[start] for start in range(0, total, step))

    def _result(self, ray: ModuleType, ref: ObjectRef[bytes], start: int, stop: int) -> bytes:
        """A chunk's bytes; its PsiError as raised in the task, any other failure as JobAborted."""
        try:
            blob: bytes = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, PsiError):
                raise exc.cause from None
            raise JobAborted(
                f"PSI on {self.engine.describe()}: the task for items {start} to {stop - 1} failed: "
                f"{type(exc.cause).__name__}"
            ) from exc
        except ray.exceptions.RayError as exc:
            raise JobAborted(
                f"PSI on {self.engine.describe()}: the task for items {start} to {stop - 1} was lost after "
                f"{self.max_retries} retries ({type(exc).__name__}); check the cluster's nodes"
            ) from exc
        return blob


def blinder_on(
    engine: ComputeEngine, count: int, key: BlindingKey, workers: int | None = None
) -> ParallelBlinder | SerialBlinder | RayBlinder:
    """The blinder for a party's ``[compute] engine``: ``RayBlinder`` on Ray, else ``blinder_for``.

    On Ray every set goes to the cluster, small ones too: the party chose where its PSI runs, and
    a task costs milliseconds. ``workers`` (``[psi] workers``) sizes the local process pool only.
    """
    if engine.on_ray:
        return RayBlinder(key, engine)
    return blinder_for(count, key, workers)
