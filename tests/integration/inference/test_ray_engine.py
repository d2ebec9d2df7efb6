"""The Ray engine on a real two-node Ray cluster on this machine: the same results as the local engine, bit for bit.

One cluster (``vfltesting.ray_cluster.two_node_cluster``: a head node and a second node, one CPU
and a small object store each) serves the whole file. On it:

- ``RayBlinder`` gives exactly the bytes ``SerialBlinder`` gives with the same key, for a chunk
  size that does not divide the number of IDs, and names a bad point by its index;
- a whole PSI over gRPC + mTLS, with both parties on the Ray engine, aligns exactly the IDs the
  local engine aligns;
- ``vfl-score`` on Ray Data writes exactly the files, IDs and scores the local loop writes;
- a worker killed mid-task (SIGKILL, by the task itself, once) is retried by Ray and the result is
  still identical, in PSI and in scoring; with no retries left PSI fails naming the lost items.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vflclient import PassiveParty, RunResult, read_party_csv
from vflcore.errors import DataError, JobAborted, PsiError
from vflcore.ml.onnx_export import MODEL_FILE
from vflcore.psi.blinding import BlindingKey, SerialBlinder
from vflcore.psi.hash_to_curve import make_dst
from vflcore.psi.ray_blinding import RayBlinder, blind_chunk, hash_and_blind_chunk
from vflcore.psi.x25519_mb import Unavailable, load
from vflcore.runtime.compute import LOCAL, ComputeEngine, connect
from vflcore.runtime.config import ClientSettings
from vflserver.scoring.engines import score_table_folder
from vflserver.scoring.model import ScoringModel
from vfltesting.id_tables import customer_ids, intersection, write_party_csv
from vfltesting.in_process import play_parties, start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.onnx_models import customers, export_standalone, write_input
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration

ray = pytest.importorskip("ray", reason="the Ray engine's tests need the extra: pip install 'vfl-service[ray]'")

from vfltesting.ray_cluster import (  # noqa: E402  # needs ray
    FirstSessionDies,
    dies_once,
    mixed_nodes,
    two_node_cluster,
    x25519_path_on_a_worker,
)

IDS = [f"customer-{n:05d}".encode() for n in range(1000)]
CHUNK = 97  # 1000 = 10 × 97 + 30: the last chunk is short


#: The SIGTERM handler this process had before it joined the cluster, and after.
SIGTERM_HANDLERS: dict[str, object] = {}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ComputeEngine]:
    """Two Ray nodes on this machine, this process their driver; the engine that points at them."""
    with two_node_cluster() as address:
        engine = ComputeEngine("ray", address)
        SIGTERM_HANDLERS["before"] = signal.getsignal(signal.SIGTERM)
        connect(engine)  # as a daemon joins its party's cluster at start
        SIGTERM_HANDLERS["after"] = signal.getsignal(signal.SIGTERM)
        assert len([node for node in ray.nodes() if node["Alive"]]) == 2
        yield engine


def test_joining_the_cluster_keeps_the_sigterm_handler(cluster: ComputeEngine) -> None:
    """ray.init installs its own SIGTERM handler (sys.exit); connect puts the process's own back."""
    assert SIGTERM_HANDLERS["after"] is SIGTERM_HANDLERS["before"]


class TestRayBlinder:
    def test_the_same_bytes_as_the_local_blinder(self, cluster: ComputeEngine) -> None:
        """Hashing, blinding and blinding a peer's points give SerialBlinder's bytes, in order."""
        key, dst = BlindingKey.generate(), make_dst("ray-job")
        local = SerialBlinder(key)
        expected = local.hash_and_blind_packed(IDS, dst)
        points = [expected[i : i + 32] for i in range(0, len(expected), 32)]
        seen: list[tuple[int, int]] = []
        with RayBlinder(key, cluster, chunk_size=CHUNK) as blinder:
            assert blinder.hash_and_blind_packed(IDS, dst, progress=lambda d, t: seen.append((d, t))) == expected
            assert blinder.blind_packed(points) == local.blind_packed(points)
        assert len(seen) == 11 and seen[-1] == (1000, 1000)

    def test_a_bad_point_is_named_by_its_index(self, cluster: ComputeEngine) -> None:
        """A low-order point in the second chunk raises PsiError with its index in the whole list."""
        points = [(9).to_bytes(32, "little")] * 300
        points[150] = bytes(32)  # u = 0: low order
        blinder = RayBlinder(BlindingKey.generate(), cluster, chunk_size=CHUNK)
        with blinder, pytest.raises(PsiError, match="point 150 is a low-order point") as caught:
            blinder.blind_packed(points)
        assert caught.value.index == 150

    def test_a_killed_worker_is_retried_and_the_result_is_identical(
        self, cluster: ComputeEngine, tmp_path: Path
    ) -> None:
        """The first chunk to start kills its worker (SIGKILL); Ray runs it again and the bytes are the same."""
        key, dst = BlindingKey.generate(), make_dst("ray-job")
        with RayBlinder(key, cluster, chunk_size=CHUNK) as blinder:
            blinder.hash_and_blind_chunk = dies_once(tmp_path / "died", hash_and_blind_chunk)
            result = blinder.hash_and_blind_packed(IDS, dst)
        assert (tmp_path / "died").exists()  # a worker did die
        assert result == SerialBlinder(key).hash_and_blind_packed(IDS, dst)

    def test_with_no_retries_the_lost_task_fails_the_job(self, cluster: ComputeEngine, tmp_path: Path) -> None:
        """max_retries = 0: the killed chunk is lost, and PSI stops with JobAborted naming its items."""
        with RayBlinder(BlindingKey.generate(), cluster, chunk_size=CHUNK, max_retries=0) as blinder:
            blinder.hash_and_blind_chunk = dies_once(tmp_path / "died", hash_and_blind_chunk)
            with pytest.raises(JobAborted, match=r"the task for items \d+ to \d+ was lost after 0 retries"):
                blinder.hash_and_blind_packed(IDS, make_dst("ray-job"))


MULTIBUFFER = load()
needs_multibuffer = pytest.mark.skipif(
    isinstance(MULTIBUFFER, Unavailable),
    reason=f"no multi-buffer X25519 here: {getattr(MULTIBUFFER, 'reason', '')}",
)


@needs_multibuffer
class TestMultiBufferOnRay:
    def test_every_node_with_ifma_takes_the_multibuffer_path(self, cluster: ComputeEngine) -> None:
        """Each node resolves [psi] x25519 itself: "auto" is the multi-buffer path on both, "openssl" is not."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
        path = ray.remote(x25519_path_on_a_worker)
        for node in nodes:
            on_node = path.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            assert ray.get([on_node.remote("auto"), on_node.remote("openssl")]) == ["multibuffer", "openssl"]

    def test_a_mixed_cluster_gives_the_same_bytes(self, cluster: ComputeEngine) -> None:
        """Chunks split between IFMA nodes and nodes without: SerialBlinder's bytes, with either X25519."""
        key, dst = BlindingKey.generate(), make_dst("ray-mixed")
        local = SerialBlinder(key)
        expected = local.hash_and_blind_packed(IDS, dst)  # this process: "auto", the multi-buffer path
        points = [expected[i : i + 32] for i in range(0, len(expected), 32)]
        with RayBlinder(key, cluster, chunk_size=CHUNK) as blinder:
            blinder.hash_and_blind_chunk = mixed_nodes(CHUNK, hash_and_blind_chunk)
            blinder.blind_chunk = mixed_nodes(CHUNK, blind_chunk)
            assert blinder.hash_and_blind_packed(IDS, dst) == expected
            assert blinder.blind_packed(points) == local.blind_packed(points)
        # and those are OpenSSL's bytes, chunk for chunk
        assert hash_and_blind_chunk(key._raw(), 0, IDS, dst, "openssl") == expected


def align(pki: Pki, tmp_path: Path, parties: dict[int, list[str]], engine: ComputeEngine) -> dict[int, list[str]]:
    """One PSI-only job over gRPC + mTLS with every party on ``engine``; each party's aligned IDs."""
    data = tmp_path / engine.name
    for party, ids in parties.items():
        write_party_csv(data / f"party{party}.csv", ids, label=party == 1)
    passive_ids = sorted(p for p in parties if p != 1)
    job = replace(SMALL_JOB, job_id=f"psi-{engine.name}", passive_parties=tuple(passive_ids))
    settings = {"engine": engine.name, "ray_address": engine.ray_address}
    running = start_job(pki, data, tmp_path / engine.name, job, join_timeout_s=30, psi_only=True, **settings)
    passive = {
        p: PassiveParty(p, read_party_csv(data / f"party{p}.csv"), ClientSettings(run_dir=data / "runs", **settings))
        for p in passive_ids
    }
    wait = play_parties(running, pki, passive)
    try:
        summary = running.summary(timeout=60)
        results = wait(60)
    finally:
        running.server.stop(grace=None)
    assert all(isinstance(r, RunResult) and r.success for r in results.values()), results
    assert summary.alignment is not None
    aligned = {1: summary.alignment.table.ids.tolist()}
    for party, player in passive.items():
        assert player.table is not None
        aligned[party] = player.table.ids.tolist()
    return aligned


class TestPsiOnRay:
    def test_aligned_ids_are_exactly_the_local_engines(self, cluster: ComputeEngine, pki: Pki, tmp_path: Path) -> None:
        """Both halves of PSI on Ray align every party to the same IDs, in the same order, as on the local engine."""
        rng = random.Random(28)
        parties = {p: customer_ids(rng.sample(range(900), k)) for p, k in ((1, 600), (2, 500), (3, 450))}
        expected = sorted(intersection(parties))
        assert 0 < len(expected) < 450
        on_ray = align(pki, tmp_path, parties, cluster)
        locally = align(pki, tmp_path, parties, LOCAL)
        assert on_ray == locally
        assert all(ids == expected for ids in on_ray.values())


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ScoringModel:
    """A standalone classifier, exported as the active party exports an APFed model."""
    path = tmp_path_factory.mktemp("model") / MODEL_FILE
    export_standalone(path, "classification")
    return ScoringModel.load(path)


class TestScoringOnRay:
    def test_scores_are_identical_to_the_local_loop(
        self, cluster: ComputeEngine, model: ScoringModel, tmp_path: Path
    ) -> None:
        """Ray Data writes the same files as the local loop, with the same IDs and bit-identical scores."""
        tables = {
            "a.parquet": customers(2500, 1),
            "b.parquet": customers(3, 2, prefix="b"),
            "x/c.parquet": customers(900, 3),
        }
        source = write_input(tmp_path / "in", tables, row_group_size=1000)
        on_ray = score_table_folder(model, source, tmp_path / "ray", engine=cluster)
        locally = score_table_folder(model, source, tmp_path / "local", engine=LOCAL)
        assert (on_ray.units, on_ray.rows) == (locally.units, locally.rows) == (5, 3403)
        files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.parquet"))
        assert files == sorted(p.relative_to(tmp_path / "ray") for p in (tmp_path / "ray").rglob("*.parquet"))
        for name in files:
            assert pq.read_table(tmp_path / "ray" / name).equals(pq.read_table(tmp_path / "local" / name)), name

    def test_a_killed_worker_is_retried_and_the_scores_are_identical(
        self, cluster: ComputeEngine, model: ScoringModel, tmp_path: Path
    ) -> None:
        """A scoring task whose worker dies after reading its row group is run again; the file is the same."""
        source = write_input(tmp_path / "in", {"a.parquet": customers(1200, 5)}, row_group_size=500)
        dying = FirstSessionDies(**vars(model), marker=str(tmp_path / "died"))
        score_table_folder(dying, source, tmp_path / "ray", engine=cluster)
        score_table_folder(model, source, tmp_path / "local", engine=LOCAL)
        assert (tmp_path / "died").exists()  # a worker did die
        for name in ("a.00000.parquet", "a.00001.parquet", "a.00002.parquet"):
            assert pq.read_table(tmp_path / "ray" / name).equals(pq.read_table(tmp_path / "local" / name)), name

    def test_a_bad_row_read_on_a_worker_is_the_same_data_error(
        self, cluster: ComputeEngine, model: ScoringModel, tmp_path: Path
    ) -> None:
        """A NaN found by a Ray worker reaches the caller as the DataError the local loop raises."""
        table = customers(50, 4)
        values = table.column("f2").to_numpy().copy()
        values[7] = float("nan")
        bad = table.set_column(table.schema.get_field_index("f2"), "f2", pa.array(values))
        source = write_input(tmp_path / "in", {"a.parquet": bad})
        with pytest.raises(DataError) as on_ray:
            score_table_folder(model, source, tmp_path / "ray", engine=cluster)
        with pytest.raises(DataError) as locally:
            score_table_folder(model, source, tmp_path / "local", engine=LOCAL)
        assert str(on_ray.value) == str(locally.value)
        assert "feature column 'f2' holds NaN or infinity" in str(on_ray.value) and "at row 7;" in str(on_ray.value)
