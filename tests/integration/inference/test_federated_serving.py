"""Federated inference behind the serving contract: UNAVAILABLE without a party, or an explicit degraded mode.

A SplitNN model needs every passive party to predict. With party 3 cut off, the servable raises
PartyUnavailable naming party 3 (the endpoints turn it into UNAVAILABLE / 503), unless a degraded
mode stands in for its representation: zeros (TVFL-0) or its training mean (TVFL-A), with a
warning on every such request.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import structlog

from vflclient import InferenceClient, ServerUnavailable, TensorRejected
from vflserver.inference.artifact import LABEL, PROBABILITIES
from vflserver.inference.config import ServingConfig
from vflserver.inference.endpoint import InferenceEndpoint
from vflserver.inference.federated import IDS, FederatedServable
from vflserver.inference.registry import ModelRegistry
from vflserver.inference.servable import PartyUnavailable
from vfltesting.eventually import eventually
from vfltesting.in_process import CuttableParty, RunningJob, start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration


@pytest.fixture
def serving(pki: Pki, digits_data: Path, tmp_path: Path) -> Iterator[tuple[RunningJob, dict[int, CuttableParty]]]:
    """A trained SplitNN job whose parties stay connected for inference."""
    job = replace(SMALL_JOB, epochs=1)
    running = start_job(pki, digits_data, tmp_path, job, offline_grace_s=0.0, keep_serving=True)
    parties = {p: CuttableParty(running.address, pki, digits_data, tmp_path, p) for p in job.passive_parties}
    try:
        running.thread.join(60)
        assert "summary" in running.outcome, running.outcome
        yield running, parties
    finally:
        running.active.shutdown("test over")
        running.server.stop(grace=None)


def _cut(running: RunningJob, party: CuttableParty, number: int) -> None:
    party.cut()
    eventually(
        lambda: number not in running.active.parties.members.online_parties(), f"party {number} offline", 10, every=0.05
    )


def test_predicts_by_id_with_every_party_is_unavailable_naming_a_missing_one_or_degrades_if_told(
    pki: Pki, serving: tuple[RunningJob, dict[int, CuttableParty]]
) -> None:
    """With every party online, the servable and the KServe v2 gRPC endpoint (SDK client, mTLS) predict by ID;
    with party 3 cut off, the servable is not ready and raises PartyUnavailable naming party 3, and the
    endpoint answers UNAVAILABLE naming it; a degraded mode stands in for party 3 instead: zeros (TVFL-0)
    or the training mean (TVFL-A), with a warning on every request.

    One trained job for what were five tests (by ID, unavailable, through the endpoint, each degraded
    mode): each trained its own (~2 CPU-s a job, measured 2026-11-29), and the cut is the last step of each.
    """
    running, parties = serving
    # TVFL-A's mean is taken while all are online
    degraded = {mode: FederatedServable(running.active, degraded=mode) for mode in ("zeros", "mean")}
    ids = [str(i) for i in running.active.table.ids[:6]]
    servable = FederatedServable(running.active)
    assert servable.ready()
    out = servable.predict({IDS: np.array([i.encode() for i in ids], dtype=object)})
    expected = running.active.predict_ids(ids)
    assert np.array_equal(out[LABEL], expected.argmax(axis=1))
    assert np.allclose(out[PROBABILITIES].sum(axis=1), 1.0, atol=1e-6)
    config = ServingConfig(grpc_listen="127.0.0.1:0", rest_listen="127.0.0.1:0")
    with (
        InferenceEndpoint(ModelRegistry(FederatedServable(running.active)), config, pki.server_files()) as endpoint,
        InferenceClient(f"127.0.0.1:{endpoint.ports.grpc}", tls=pki.caller_files("test-caller")) as client,
    ):
        assert client.metadata(running.active.job.job_id).inputs[0].name == IDS
        served = client.infer(running.active.job.job_id, {IDS: np.array([i.encode() for i in ids[:3]], dtype=object)})
        assert np.array_equal(served[LABEL], running.active.predict_ids(ids[:3]).argmax(axis=1))
        # An ID outside the intersection is refused without saying which, so a caller cannot
        # sort its IDs into aligned and not aligned from one answer.
        with pytest.raises(TensorRejected, match="1 of the 2 IDs cannot be served") as refused:
            client.infer(running.active.job.job_id, {IDS: np.array([ids[0].encode(), b"nobody"], dtype=object)})
        assert "nobody" not in str(refused.value)
        _cut(running, parties[3], 3)
        assert not servable.ready()
        known = str(running.active.table.ids[0]).encode()
        with pytest.raises(PartyUnavailable, match="party 3"):
            servable.predict({IDS: np.array([known], dtype=object)})
        with pytest.raises(ServerUnavailable, match="party 3"):
            client.infer(running.active.job.job_id, {IDS: np.array([ids[0].encode()], dtype=object)})
    for mode, stands_in in degraded.items():
        with structlog.testing.capture_logs() as logs:
            out = stands_in.predict({IDS: np.array(ids[:4], dtype=object)})
            stands_in.predict({IDS: np.array(ids[:4], dtype=object)})
        assert out[PROBABILITIES].shape == (4, running.active.job.num_outputs), mode
        warnings = [e for e in logs if e["event"] == "degraded_inference"]
        assert len(warnings) == 2 and warnings[0]["offline_parties"] == [3] and warnings[0]["mode"] == mode
        stand_in = stands_in._substitutes[3]
        if mode == "zeros":
            assert not stand_in.any()
        else:
            assert stand_in.shape == (running.active.algorithm.upload_width,) and stand_in.any()
