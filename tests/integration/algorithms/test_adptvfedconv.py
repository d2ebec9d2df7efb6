"""AdptVFedConv over real gRPC and mTLS (003): digits cut into four 4x4 quadrants, one per party.

The server and three passive parties run in this process (servers on port 0, certificates from
the session PKI). The run must reach the stated accuracy bar and agree step for step with the
in-process reference the benchmark trains (``vflalgorithms.adptvfedconv.reference``); the broadcast
extractor W_e^1 must
arrive bit-identical at every party (both ends log a SHA-256 of its tensors); feature maps larger
than one chunk must travel in chunks no bigger than the wire's limit; and a party that vanishes in
phase 2 must fail the job with its name, leaving no checkpoint behind.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import structlog

from vflalgorithms.adptvfedconv.reference import ReferenceAdptVFedConv
from vflalgorithms.adptvfedconv.spec import FEATURE_MAPS
from vflalgorithms.reference import aligned_tables
from vflclient import read_party_csv
from vflcore.errors import PartyUnavailable
from vflcore.wire import serde as wire
from vflcore.wire.tensors import TensorKey
from vfltesting.equivalence import assert_same_losses
from vfltesting.eventually import eventually
from vfltesting.in_process import CuttableParty, run_whole_job, start_job
from vfltesting.jobs import DIGITS_JOB
from vfltesting.pki import Pki

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]

JOB = replace(
    DIGITS_JOB,
    job_id="adptvfedconv-digits",
    algorithm="adptvfedconv",
    seed=3,
    epochs=4,
    passive_parties=(2, 3, 4),
    algorithm_options={"pretrain_epochs": 5, "finetune_epochs": 3, "channels": 16},
)
# On the 360 held-out digits; this job measured 0.967 (a centralised MLP reaches about 0.97). Its
# phases are short (5 pre-training, 3 autoencoder and 4 classifier epochs, 92 classifier steps; they
# were 10, 5 and 12, which reached 0.975): every step is held to the reference however many there are,
# and this cut the module's CPU from 21.5 to 11.9 CPU-s.
ACCURACY_BAR = 0.93


@pytest.fixture(scope="module")
def trained(pki: Pki, digits_quadrants: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, list[dict]]:
    with structlog.testing.capture_logs() as logs:
        running = run_whole_job(pki, digits_quadrants, tmp_path_factory.mktemp("adptvfedconv"), JOB, top_hidden=(64,))
    return running, logs


def test_reaches_the_accuracy_bar(trained: tuple[object, list[dict]]) -> None:
    running, _ = trained
    metrics = running.summary().final_metrics  # type: ignore[attr-defined]
    assert metrics["accuracy"] >= ACCURACY_BAR, metrics


def test_every_classifier_step_matches_the_reference(
    trained: tuple[object, list[dict]], digits_quadrants: Path
) -> None:
    """Each W_s step's loss agrees with ``ReferenceAdptVFedConv`` (all phases in one process) within 1e-5."""
    running, _ = trained
    tables = {1: read_party_csv(digits_quadrants / "party1.csv", label_column="label")}
    tables.update({p: read_party_csv(digits_quadrants / f"party{p}.csv") for p in JOB.passive_parties})
    job, pieces, labels, _ = aligned_tables(JOB, tables)
    reference = ReferenceAdptVFedConv(job, pieces, labels, top_hidden=(64,))
    for epoch in range(JOB.epochs):
        reference.train_epoch(epoch)
    federated = running.active.algorithm.step_losses  # type: ignore[attr-defined]
    assert_same_losses(federated, reference.step_losses, JOB.job_id)


def test_broadcast_extractor_arrives_bit_identical(trained: tuple[object, list[dict]]) -> None:
    _, logs = trained
    sent = [e["sha256"] for e in logs if e["event"] == "extractor_broadcast"]
    received = [e["sha256"] for e in logs if e["event"] == "extractor_received"]
    assert len(sent) == 1 and len(received) == 3
    assert set(received) == set(sent)


def test_feature_maps_travel_in_chunks_under_the_message_limit() -> None:
    """H^k of every digit at 64 channels (1.8 MB) is cut into chunks of at most 1 MiB, and reassembles exactly."""
    maps = np.random.default_rng(0).standard_normal((1797, 64 * 2 * 2)).astype(np.float32)
    key = TensorKey("job", 0, 0, FEATURE_MAPS)
    chunks = list(wire.tensor_to_chunks(key, maps))
    assert len(chunks) == 2
    assert all(chunk.ByteSize() <= wire.CHUNK_BYTES + 1024 for chunk in chunks)  # + the key and header
    assert all(chunk.ByteSize() < 4 * 1024 * 1024 for chunk in chunks)  # gRPC's default message limit
    got_key, got = wire.tensor_from_chunks(iter(chunks))
    assert got_key == key and np.array_equal(got, maps)


def test_a_party_lost_in_phase_2_fails_the_job_by_name_and_saves_nothing(
    pki: Pki, digits_quadrants: Path, tmp_path: Path
) -> None:
    """Party 3 disconnects once the extractor is broadcast: the job fails naming party 3, with no checkpoint."""
    # One pre-training epoch, not the module job's 5: phase 1 (the server's alone) only has to end
    # before the transfer this test cuts into (about 1 CPU-s less).
    options = {**JOB.algorithm_options, "pretrain_epochs": 1, "finetune_epochs": 10}
    job = replace(JOB, job_id="adptvfedconv-lost", algorithm_options=options)
    running = start_job(pki, digits_quadrants, tmp_path, job, offline_grace_s=0.0)
    try:
        parties = {p: CuttableParty(running.address, pki, digits_quadrants, tmp_path, p) for p in job.passive_parties}

        def transferring() -> bool:
            algorithm = getattr(running.active, "algorithm", None)
            return algorithm is not None and getattr(algorithm, "phase", "") == "transfer"

        eventually(transferring, "the transfer phase", 120)
        parties[3].cut()
        running.thread.join(120)
        error = running.outcome.get("error")
        assert isinstance(error, PartyUnavailable) and error.party == 3, running.outcome
        run_dir = running.active.run_dir
        assert not list(run_dir.glob("*.pt")) and not (run_dir / "summary.json").exists()
    finally:
        running.server.stop(grace=None)
