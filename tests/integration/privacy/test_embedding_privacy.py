"""Embedding protection over real mTLS: enforced by the passive party itself, seeded, and resumable.

The first tests run the server and both passive parties in this process (threads, port 0, mTLS):
a party whose own config requires embedding noise refuses a job without it, naming the key, and
the job fails with that reason; the same SDK then trains a noisy SplitNN job, with the rows cut
in two parts on the wire and a bf16 codec, and reports the ε of what it sent. The last test runs
the daemons as processes and kills one with SIGKILL in the middle of an epoch: the resumed noisy
job has the per-step losses of the uninterrupted noisy run.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from vflclient import Connection, JoinRejected, PartyPrivacy, PassiveParty, RunResult, read_party_csv
from vflcore.data.checkpoints import epoch_path
from vflcore.job.privacy import PrivacySpec
from vflcore.runtime.config import ClientSettings
from vflprivacy.accounting import REPORT_FILE, embedding_epsilon
from vflprivacy.noise import KEY_FILE
from vflserver.training.reports import RunSummary
from vfltesting.faults import operator_client, restart_after_kill, run_outcome, service_with_short_limits
from vfltesting.freeze import frozen
from vfltesting.in_process import RunningJob, start_job
from vfltesting.jobs import DIGITS_JOB
from vfltesting.pki import Pki
from vfltesting.recovery import assert_same_model
from vfltesting.service import finish_job, job_document, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]

NOISY = PrivacySpec(embedding_clip=1.0, embedding_noise_multiplier=0.5)
#: Party 2's own config: it sends nothing derived from its features without noise of at least this multiplier.
REQUIRED = PartyPrivacy(min_embedding_noise_multiplier=0.5, source="party2.toml")
PLAIN_JOB = replace(DIGITS_JOB, job_id="plain", epochs=2, wire_codec="bf16", algorithm_options={"micro_batches": 2})
NOISY_JOB = replace(PLAIN_JOB, job_id="noisy", privacy=NOISY)


def _party(running: RunningJob, pki: Pki, data: Path, run_dir: Path, party: int, privacy: PartyPrivacy | None) -> Any:
    """Passive party ``party`` through the SDK, with its own privacy requirement, in a thread; returns a waiter."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            table = read_party_csv(data / f"party{party}.csv")
            with Connection(running.address, party, tls=pki.party_files(party), connect_timeout_s=20) as conn:
                box["result"] = PassiveParty(party, table, ClientSettings(run_dir=run_dir), privacy=privacy).run(conn)
        except BaseException as exc:
            box["result"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def wait() -> RunResult | BaseException:
        thread.join(120)
        assert not thread.is_alive(), f"party {party} did not finish in time"
        result: RunResult | BaseException = box["result"]
        return result

    return wait


def _run(
    pki: Pki, data: Path, root: Path, job: Any, required: PartyPrivacy | None = REQUIRED
) -> tuple[RunningJob, dict[int, RunResult | BaseException]]:
    """Serve ``job``; party 2 requires ``required``, party 3 nothing. Both parties' outcomes.

    Each party's noise key is fixed before the job, so the run is the same on every machine.
    """
    for party in (2, 3):
        folder = root / "runs" / job.job_id / f"party-{party}"
        folder.mkdir(parents=True)
        (folder / KEY_FILE).write_bytes(bytes([party]) * 32)
        (folder / KEY_FILE).chmod(0o600)
    running = start_job(pki, data, root, job, join_timeout_s=30, top_hidden=(64,))
    try:
        waits = {p: _party(running, pki, data, root / "runs", p, required if p == 2 else None) for p in (2, 3)}
        running.thread.join(120)
        return running, {p: wait() for p, wait in waits.items()}
    finally:
        running.server.stop(grace=None)


Refused = tuple[RunningJob, dict[int, Any], Path]


@pytest.fixture(scope="module")
def plain(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Refused:
    """The job without embedding noise: party 2 must refuse it."""
    root = tmp_path_factory.mktemp("plain")
    return (*_run(pki, digits_data, root, PLAIN_JOB), root / "runs" / PLAIN_JOB.job_id)


@pytest.fixture(scope="module")
def noisy(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    """The same job with embedding noise, after the refusal, with the same requirement: it trains."""
    root = tmp_path_factory.mktemp("noisy")
    running, results = _run(pki, digits_data, root, NOISY_JOB)
    assert all(isinstance(r, RunResult) and r.success for r in results.values()), results
    return root / "runs" / NOISY_JOB.job_id, running.summary()


def _losses(folder: Path) -> list[float]:
    """Every training step's loss, as the active party wrote it."""
    losses: list[float] = json.loads((folder / "party-1" / "summary.json").read_text())["step_losses"]
    return losses


class TestRefusal:
    def test_the_party_refuses_naming_its_key_and_the_jobs(self, plain: Refused) -> None:
        _, results, _ = plain
        refused = results[2]
        assert isinstance(refused, JoinRejected), refused
        message = str(refused)
        assert "party2.toml" in message and "[privacy] min_embedding_noise_multiplier = 0.5" in message
        assert "embedding_noise_multiplier is 0" in message and "ask the job's owner" in message

    def test_the_server_fails_the_job_with_the_partys_reason(self, plain: Refused) -> None:
        running, _, _ = plain
        error = running.outcome.get("error")
        assert error is not None, "the job ran although party 2 refused it"
        assert "party 2" in str(error) and "min_embedding_noise_multiplier" in str(error), error

    def test_the_party_refused_before_any_work(self, plain: Refused) -> None:
        """Refused before PSI: party 2 aligned nothing, built no model and holds no key or checkpoint for the job."""
        _, _, folder = plain
        assert [p.name for p in (folder / "party-2").iterdir()] == [KEY_FILE]  # the test's own


class TestNoisyJob:
    def test_it_trains_with_micro_batches_and_bf16(self, noisy: tuple[Path, RunSummary]) -> None:
        """Ten digits, noise of std 0.5 on rows clipped to norm 1 from both parties: three times chance (0.1) or more.

        Seen: 0.406 after 2 epochs; the same job without noise reaches 0.705 (the next test).
        """
        _, summary = noisy
        print(f"noisy SplitNN digits, 2 epochs: accuracy {summary.final_metrics['accuracy']:.3f}")
        assert summary.final_metrics["accuracy"] >= 0.3

    def test_the_server_trained_on_noised_embeddings(
        self, noisy: tuple[Path, RunSummary], pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """The losses differ from the same job's without noise (same seed, batches and model) from the first step on."""
        folder, _ = noisy
        running, results = _run(pki, digits_data, tmp_path, PLAIN_JOB, required=None)
        assert all(isinstance(r, RunResult) and r.success for r in results.values()), results
        print(f"accuracy without noise: {running.summary().final_metrics['accuracy']:.3f}")
        noisy_losses, clear_losses = _losses(folder), _losses(tmp_path / "runs" / PLAIN_JOB.job_id)
        half = len(clear_losses) // 2
        noisy_late, clear_late = sum(noisy_losses[half:]) / half, sum(clear_losses[half:]) / half
        print(f"mean loss of the second epoch: noisy {noisy_late:.4f}, clear {clear_late:.4f}")
        assert len(noisy_losses) == len(clear_losses)
        assert noisy_losses[0] != clear_losses[0]  # from the first step on, the server saw other values
        assert noisy_late > clear_late + 0.1

    @pytest.mark.parametrize("party", [2, 3])
    def test_each_party_reports_epsilon_from_the_accountant(self, noisy: tuple[Path, RunSummary], party: int) -> None:
        """Two epochs' embeddings, two evaluations, the final inference: five releases, and ε for them."""
        folder, _ = noisy
        report = json.loads((folder / f"party-{party}" / REPORT_FILE).read_text())
        print(
            f"party {party}: {report['releases']} releases, epsilon {report['epsilon']:.2f} at delta {report['delta']}"
        )
        assert report["releases"] == len(report["ledger"]) >= 4
        assert report["epsilon"] == pytest.approx(embedding_epsilon(0.5, report["releases"], NOISY.dp_delta))
        assert (folder / f"party-{party}" / KEY_FILE).stat().st_mode & 0o777 == 0o600


#: What each algorithm's passive half uploads in a training round: what the noise must sit in front of.
ROUND_UPLOADS = {
    "splitnn": "embedding",
    "fedbcd": "embedding",
    "async": "embedding",
    "vimsgd": "embedding",
    "vimadmm": "embedding",
    "vimadmm_j": "embedding",
    "apfed_r": "apfed/passive-gradient",
    "apfed_c": "apfed/passive-gradient",
}


#: VIMADMM's local steps per batch (τ), 2 rather than the default 10: the embedding goes up once a batch
#: whatever τ (the local steps update the bottom model after it is sent); the two VIMADMM jobs here took
#: 23.6 CPU-s at 10 and 19.2 at 2, pytest's start (~15) included (2026-11-29).
LOCAL_STEPS = {"vimadmm": {"local_steps": 2}, "vimadmm_j": {"local_steps": 2}}


@pytest.mark.parametrize("algorithm", sorted(ROUND_UPLOADS))
def test_every_algorithm_trains_behind_the_noise(pki: Pki, cancer_data: Path, tmp_path: Path, algorithm: str) -> None:
    """One noisy epoch of each algorithm that sends per-row tensors: it finishes, and its round's uploads were
    protected and counted (and async's warm-up upload, the evaluation and the inference, where the algorithm sends
    them).

    On the breast cancer set (569 rows: PSI on a third of digits' IDs, 8 batches an epoch rather than 15): what
    is checked is which uploads the noise sits in front of, not what the model learns."""
    job = replace(
        DIGITS_JOB,
        job_id=f"noisy-{algorithm.replace('_', '-')}",
        algorithm=algorithm,
        epochs=1,
        privacy=NOISY,
        algorithm_options=LOCAL_STEPS.get(algorithm, {}),
    )
    _, results = _run(pki, cancer_data, tmp_path, job)
    assert all(isinstance(r, RunResult) and r.success for r in results.values()), results
    for party in (2, 3):
        report = json.loads((tmp_path / "runs" / job.job_id / f"party-{party}" / REPORT_FILE).read_text())
        names = {name for name, _ in report["ledger"]}
        assert [ROUND_UPLOADS[algorithm], 0] in report["ledger"], report["ledger"]
        if algorithm == "async":
            assert "warmup/embedding" in names, names
        if not algorithm.startswith("apfed"):  # APFed's active party evaluates and serves alone
            assert "eval/embedding" in names and any(n.startswith("infer/") for n in names), names
        assert report["epsilon"] == pytest.approx(embedding_epsilon(0.5, len(report["ledger"]), NOISY.dp_delta))


#: The daemons' job: batches of 16 make an epoch of 59 steps, and a checkpoint every 10 steps marks the middle of
#: epoch 2 without timing (steps 60-110 are batches 1-51 of it): the kill lands once party 3 has saved one there,
#: 48 steps or more before the epoch's end. Batches of 8 (117 steps an epoch) cost about 5 CPU-s more a job.
DAEMON_JOB = {"batch_size": 16, "join_timeout_s": 60, "checkpoint_every_steps": 10}
#: Two epochs: the kill lands inside the second, and the resumed job must still finish it.
DAEMON_EPOCHS = 2
#: Both daemons' own config: ``[privacy]`` of partyN.toml.
DAEMON_PRIVACY = {"privacy": {"min_embedding_noise_multiplier": 0.5}}
#: The noisy job twice on the same daemons, under two ids: uninterrupted, then with party 3 killed inside epoch 2.
#: The id feeds neither the seeds nor the noise (each party's key is fixed, ``_daemon_job``), so the two must agree.
CLEAN, KILLED = "noisy-clean", "noisy-killed"


def _daemon_job(run_dir: Path, job_id: str, **privacy: float) -> dict[str, dict[str, Any]]:
    """The job file, with ``[privacy]`` if given; each party's noise key fixed, as in ``_run``."""
    for party in (2, 3):
        folder = run_dir / job_id / f"party-{party}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / KEY_FILE).write_bytes(bytes([party]) * 32)
        (folder / KEY_FILE).chmod(0o600)
    document = job_document(job_id, "splitnn", epochs=DAEMON_EPOCHS, **DAEMON_JOB)
    if privacy:
        document["privacy"] = dict(privacy)
    return document


def _daemons_run(pki: Pki, data: Path, root: Path) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """vfl-server and two vfl-client daemons that require noise, one job after another: a job without noise, which
    must fail naming the key; the noisy job (``CLEAN``); the noisy job again (``KILLED``), with a kill -9 of party 3
    once it has saved a checkpoint inside epoch 2, then a restart. Both noisy jobs' outcomes and party 3's privacy.json.

    One service for the three jobs (it was one for the refusal and the clean job and one for the killed job: three
    forked daemon starts more, about 3 CPU-s).
    """
    run = service_with_short_limits(root, pki, data, client_tables=DAEMON_PRIVACY)
    runs = run.root / "runs"
    party3 = runs / KILLED / "party-3"
    noisy = {"embedding_clip": 1.0, "embedding_noise_multiplier": 0.5}
    try:
        with operator_client(run, pki) as jobs:
            jobs.submit(_daemon_job(runs, "no-noise"))
            events = [str(event) for event in jobs.watch("no-noise")]
            refused = jobs.get("no-noise")
            assert refused.state == "failed", events
            assert "min_embedding_noise_multiplier" in refused.error, refused.error
            assert "embedding_noise_multiplier is 0" in refused.error, refused.error
            jobs.submit(_daemon_job(runs, CLEAN, **noisy))
            finish_job(jobs, run, CLEAN)
            jobs.submit(_daemon_job(runs, KILLED, **noisy))
            wait_until(lambda: any(party3.glob("epoch-0001-batch-*.pt")), "a checkpoint inside epoch 2", run)
            with frozen(run, "party-3"):  # checked while frozen: what it sees holds at the kill
                assert not epoch_path(party3, 1).exists(), "the kill missed the middle of epoch 2"
                run.kill("party-3")
            restart_after_kill(run, "party-3")
            finish_job(jobs, run, KILLED)
        assert all(run.alive().values()), run.tail()
    finally:
        run.stop()  # SIGTERM, then up to 60 s: a loaded 2-core machine took 14 s to stop vfl-server
    reports = [json.loads((runs / job_id / "party-3" / REPORT_FILE).read_text()) for job_id in (CLEAN, KILLED)]
    return run_outcome(run, CLEAN), run_outcome(run, KILLED), *reports


@pytest.mark.timeout(600)
class TestDaemons:
    def test_a_refused_job_fails_and_a_killed_noisy_job_resumes_with_the_same_losses(
        self, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """vfl-client daemons whose configs require noise: a job without it fails naming the key, the daemons take
        the next job; kill -9 of party 3 inside epoch 2 and a restart end with the uninterrupted noisy run's losses."""
        clean_outcome, killed_outcome, clean, killed = _daemons_run(pki, digits_data, tmp_path)
        assert_same_model(killed_outcome, clean_outcome)
        print(f"party 3 after a kill: {killed['releases']} releases, epsilon {killed['epsilon']:.2f}")
        # The steps sent twice (before the kill, and again after it) count once; inference ids differ per run.
        assert _training_releases(killed) == _training_releases(clean)
        assert killed["releases"] == clean["releases"] and killed["epsilon"] == clean["epsilon"]


def _training_releases(report: dict[str, Any]) -> list[list[Any]]:
    return [entry for entry in report["ledger"] if not str(entry[0]).startswith("infer/")]
