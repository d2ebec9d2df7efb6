"""A two-node Ray cluster on this machine, and tasks that kill their own worker once: for the Ray engine's tests.

``ray.cluster_utils.Cluster`` starts a head node and a second node as separate raylets on this
host, each with its own object store, so tasks are scheduled across nodes and results travel
between them as they would between machines. The resources are kept small (one CPU, a small
object store each): the tests' data is tiny, and the suite shares two cores with everything else.

``dies_once`` wraps a chunk function so that the first call to reach it (across every worker of
the cluster, told apart by a marker file) kills its own process with SIGKILL mid-task: Ray sees a
worker die, not an exception, and must retry the task (``max_retries``) for the result to come
back at all. ``FirstSessionDies`` does the same inside ``vfl-score``'s tasks: a scoring model
whose first session, built after the task has read its row group, kills the worker.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import onnxruntime

from vflcore.psi.x25519 import multibuffer_for
from vflserver.scoring.model import ScoringModel

T = TypeVar("T")

#: Per node: one CPU and a small object store (Ray's minimum is 75 MiB).
NODE_CPUS = 1
NODE_OBJECT_STORE_BYTES = 80 * 1024 * 1024
#: Head-node processes no test reads, each a Python process of about 1.2 CPU-s (measured 2026-11-29):
#: the log monitor (drivers connect with ``log_to_driver=False``: it copies logs to nobody) and the
#: autoscaler's monitor (the nodes are fixed). The GCS, raylets, agents and workers are as before.
HEAD_WITHOUT = {"include_log_monitor": False, "no_monitor": True}
#: Ray's usage statistics off, for the cluster's processes (started from this environment) and the
#: driver: without it Ray Data's first dataset starts a usage-collection actor, a worker process of
#: 2 CPU-s (measured 2026-11-29) that records what nobody sends anywhere from a test.
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}


@contextmanager
def two_node_cluster() -> Iterator[str]:
    """Start a head node and one more node on this machine; yields the address a driver connects to.

    Connecting is the caller's (``vflcore.runtime.compute.connect``, as a daemon joins its party's
    cluster); a driver still connected is disconnected on exit, then both nodes are stopped.
    """
    import ray
    from ray.cluster_utils import Cluster

    head = {"num_cpus": NODE_CPUS, "object_store_memory": NODE_OBJECT_STORE_BYTES, **HEAD_WITHOUT}
    before = {name: os.environ.get(name) for name in QUIET_ENV}
    os.environ.update(QUIET_ENV)
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(num_cpus=NODE_CPUS, object_store_memory=NODE_OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]  # ray leaves it unannotated
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def dies_once(marker: Path, function: Callable[..., T]) -> Callable[..., T]:
    """``function``, except that the first call anywhere creates ``marker`` and kills its own process.

    The marker is created with O_EXCL, so exactly one call dies however many run at once; every
    later call (the retry included) finds it and runs ``function``.
    """
    path = str(marker)

    def first_call_dies(*args: Any) -> T:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return function(*args)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process was killed")

    return first_call_dies


def mixed_nodes(chunk_size: int, function: Callable[..., T]) -> Callable[..., T]:
    """``function`` as on a cluster where every other chunk lands on a node without AVX-512 IFMA.

    A chunk task resolves ``[psi] x25519`` where it runs (its last argument): "auto" takes the
    multi-buffer path on a node with IFMA and OpenSSL's on one without. One machine cannot lack
    IFMA for some of its workers, so the chunks at even positions (offset // chunk_size) are run
    as such a node runs them, with "openssl"; the others keep the driver's setting.
    """

    def on_mixed_nodes(*args: Any) -> T:
        offset = args[1]
        if (offset // chunk_size) % 2 == 0:
            args = (*args[:-1], "openssl")
        return function(*args)

    return on_mixed_nodes


def x25519_path_on_a_worker(setting: str) -> str:
    """Which X25519 a Ray worker's blinding takes under ``setting``: "multibuffer" or "openssl".

    The same test the chunk tasks apply (``multibuffer_for`` on a batch of 32-byte points).
    """
    return "openssl" if multibuffer_for(setting, [(9).to_bytes(32, "little")]) is None else "multibuffer"


@dataclass(frozen=True)
class FirstSessionDies(ScoringModel):
    """A scoring model whose first ``session()`` anywhere (``marker`` absent) kills its process.

    Ray workers import this class by name (the test's working directory is on their path), so it
    must live in an importable module, not in a test file. Never score with it in the test's own
    process: the first session would kill pytest.
    """

    marker: str = ""

    def session(self) -> onnxruntime.InferenceSession:
        dies_once(Path(self.marker), lambda: None)()
        return super().session()
