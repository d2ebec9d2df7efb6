"""A whole SplitNN job in one process over real mTLS: server on port 0, two passive parties."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from vflclient import Connection, PassiveParty, RunResult, read_party_csv
from vflcore.data.checkpoints import load_checkpoint
from vflcore.ml.models import load_factory
from vflcore.runtime.config import ClientSettings
from vflserver.training.reports import RunSummary
from vfltesting.in_process import RunningJob, run_party_in_thread, start_job, stop_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Trained:
    """The class's one job, run to its end: the server, its summary, each passive party's result, its folder."""

    running: RunningJob
    summary: RunSummary
    results: list[RunResult | BaseException]
    tmp_path: Path


#: One 6-epoch job serves the class's three tests (each ran its own before: 6, 2 and 1 epochs, three
#: PSIs and three sets of parties; about 3 CPU-s more). What each checks holds on any finished job
#: with two epochs or more: checkpoints, byte counts per phase ("train 0", "train 1"), IDs refused.
@pytest.fixture(scope="class")
def trained(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trained]:
    tmp_path = tmp_path_factory.mktemp("splitnn-job")
    running = start_job(pki, digits_data, tmp_path, replace(SMALL_JOB, epochs=6))
    try:
        waits = [run_party_in_thread(running, pki, digits_data, tmp_path, p) for p in (2, 3)]
        summary = running.summary()
        yield Trained(running, summary, [w() for w in waits], tmp_path)
    finally:
        stop_job(running)


class TestSplitNNJob:
    def test_job_trains_checkpoints_and_scores(self, trained: Trained) -> None:
        """Every party checkpoints each epoch and keeps the newest two, and the final federated inference reaches
        0.85 after 6 epochs."""
        summary, results, tmp_path = trained.summary, trained.results, trained.tmp_path
        assert all(isinstance(r, RunResult) and r.success for r in results), results
        assert summary.final_metrics["accuracy"] >= 0.85
        assert set(summary.final_metrics) == {"accuracy", "macro_f1", "precision", "recall"}
        for party in (1, 2, 3):
            party_dir = tmp_path / "runs" / "test-job" / f"party-{party}"
            assert sorted(p.name for p in party_dir.glob("epoch-*.pt")) == ["epoch-0004.pt", "epoch-0005.pt"]
            assert load_checkpoint(party_dir / "latest.pt")["epoch"] == 5
        assert (tmp_path / "runs" / "test-job" / "party-1" / "test_predictions.csv").exists()

    def test_both_ends_count_the_same_bytes(self, trained: Trained) -> None:
        """The server's count of each party's traffic, per phase, equals the party's own count, mirrored;
        a training round moves two (rows x 16) float32 tensors per batch and party, plus framing."""
        running, summary, tmp_path = trained.running, trained.summary, trained.tmp_path
        assert all(isinstance(r, RunResult) and r.success for r in trained.results), trained.results
        rows = len(running.active.schedule.train_rows)
        for party in (2, 3):
            server_view = summary.wire[party]
            own = json.loads((tmp_path / "runs" / "test-job" / f"party-{party}" / "wire_bytes.json").read_text())
            assert set(own) == set(server_view) >= {"psi", "train 0", "train 1", "eval 0", "eval 1", "infer"}
            for phase, counts in own.items():
                assert counts == {"sent": server_view[phase]["received"], "received": server_view[phase]["sent"]}
            payload = rows * SMALL_JOB.embedding_dim * 4
            for direction in ("sent", "received"):
                assert payload < own["train 0"][direction] < 1.1 * payload
        assert summary.epochs[0].wire_mb == pytest.approx(
            sum(sum(summary.wire[p]["train 0"].values()) for p in (2, 3)) / 1e6
        )

    def test_predict_by_id_matches_final_metrics(self, trained: Trained) -> None:
        """Scoring rows by ID with every party online returns one output row per ID."""
        active = trained.running.active
        with pytest.raises(KeyError, match="1 of the 2 IDs cannot be served") as refused:
            active.predict_ids([str(active.table.ids[0]), "no-such-id"])
        assert "no-such-id" not in str(refused.value)  # which IDs are aligned is not told


class TestOwnModel:
    def test_factory_model_trains_and_is_checkpointed(
        self, job_factory, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """A passive party built from a module:function factory trains, and its checkpoint holds that model."""
        running = job_factory(replace(SMALL_JOB, epochs=1))
        factory = load_factory("vfltesting.models:small_bottom")
        box: dict[str, object] = {}

        def party(n: int) -> None:
            table = read_party_csv(digits_data / f"party{n}.csv")
            with Connection(running.address, n, tls=pki.party_files(n), connect_timeout_s=20) as conn:
                box[n] = PassiveParty(
                    n, table, ClientSettings(run_dir=tmp_path / "runs"), model_factory=factory if n == 2 else None
                ).run(conn)

        threads = [threading.Thread(target=party, args=(n,), daemon=True) for n in (2, 3)]
        for t in threads:
            t.start()
        running.summary()
        for t in threads:
            t.join(60)
        assert all(isinstance(r, RunResult) and r.success for r in box.values()), box
        state = load_checkpoint(tmp_path / "runs" / "test-job" / "party-2" / "latest.pt")["algorithm"]["bottom"]
        assert state["0.weight"].shape == (12, 24)  # the factory's first layer, not the built-in MLP's
