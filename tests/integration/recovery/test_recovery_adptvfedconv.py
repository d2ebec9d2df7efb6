"""AdptVFedConv recovers too: kills in its phases 2 and 3, and checkpoints inside phase 3 epochs; same model.

A file of its own so that pytest-xdist (``--dist loadfile``) runs it beside ``test_recovery.py``.
The helpers are in ``vfltesting.faults``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vflclient import JobClient
from vflcore.data.checkpoints import checkpoint_positions
from vflcore.job.schedule import Position
from vfltesting.faults import epochs_done, operator_client, restart_after_kill, service_with_short_limits
from vfltesting.freeze import frozen_when
from vfltesting.pki import Pki
from vfltesting.recovery import JobOutcome, assert_same_model, job_outcome
from vfltesting.service import ServiceRun, finish_job, job_document, log_events, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


#: AdptVFedConv on digits quadrants, one per party (003): its passive parties work only in epoch 1.
#: Batches of 32 (45 an epoch): the kills wait for events, not time, so a short epoch is as good as a
#: long one; at 16 (90 an epoch) the file cost 33.9 CPU-s, at 32 28.7 (user+sys, pytest -n 0,
#: measured 2026-11-29; at 64 no less, 29.0). One pre-training epoch, not 3:
#: no kill lands in it (phase 1 runs on the server alone, and again after the phase-2 kill, which
#: nothing saved before). One fine-tuning epoch, not 2: the phase-2 kill freezes party 3 inside
#: it (``frozen_when``), so it needs no long window. 4 channels, not 8: nothing here depends on
#: the width. Fine-tuning on three parties at once is the longest part of a job.
CONV_OPTIONS = {"pretrain_epochs": 1, "finetune_epochs": 1, "channels": 4}
#: Two epochs of phase 3: the phase-3 kill after the first and the checkpoint kill inside the
#: second each leave training to resume into; a third epoch checked nothing more.
CONV_EPOCHS = 2
#: Checkpoints inside phase 3's epochs every 25 steps (steps 50 and 75 are batches 5 and 30 of epoch 2).
CONV_EVERY_STEPS = 25
CONV_JOB = {"batch_size": 32, "join_timeout_s": 60, "passive_parties": [2, 3, 4], "seed": 3, "learning_rate": 0.003}


@pytest.fixture(scope="module")
def shared(pki: Pki, digits_quadrants: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """One server and the three passive daemons for the module's jobs, each under its own job id (an id
    changes no seed or row order): eight daemon starts fewer than a service a job.
    Every checkpoint is kept (the step checkpoints' test looks at them); the others read only the newest."""
    keeping = {"keep_checkpoints": 100}
    root = tmp_path_factory.mktemp("adptvfedconv")
    run = service_with_short_limits(root, pki, digits_quadrants, parties=(2, 3, 4), server=keeping, client=keeping)
    try:
        yield run
    finally:
        run.close()


def _adptvfedconv(
    run: ServiceRun,
    pki: Pki,
    job_id: str,
    kill: Callable[[ServiceRun, JobClient, str], None] | None = None,
    **job: Any,
) -> JobOutcome:
    """One AdptVFedConv job on digits quadrants; ``kill`` interrupts it (and restarts what it killed)."""
    options = {"epochs": CONV_EPOCHS, "algorithm_options": CONV_OPTIONS}
    document = job_document(job_id, "adptvfedconv", **options, **CONV_JOB, **job)
    with operator_client(run, pki) as jobs:
        jobs.submit(document)
        if kill is not None:
            kill(run, jobs, job_id)
        finish_job(jobs, run, job_id)
    return job_outcome(run.root / "runs", job_id, parties=(1, 2, 3, 4))


def _job_logged(log: Path, job_id: str, name: str) -> bool:
    """Whether a daemon's log has an event ``name`` of job ``job_id`` (the daemons run other jobs too)."""
    return any(e.get("job") == job_id for e in log_events(log, name))


@pytest.fixture(scope="module")
def clean_adptvfedconv(shared: ServiceRun, pki: Pki) -> JobOutcome:
    return _adptvfedconv(shared, pki, "clean-adptvfedconv")


class TestAdptVFedConv:
    def test_killed_in_phase_2_in_phase_3_and_after_a_checkpoint_inside_a_phase_3_epoch(
        self, clean_adptvfedconv: JobOutcome, service: ServiceRun, pki: Pki
    ) -> None:
        """kill -9 of party 3 while it fine-tunes (phase 2), while the server trains alone (phase 3), and after
        a checkpoint inside phase 3's epoch 2 (checkpoint_every_steps = 25: the server tells the idle parties
        when to save), where it resumes: the same model.

        One job for what were two tests (the kills in phases 2 and 3; the checkpoints inside phase 3
        epochs), each a job of its own: the checkpoints inside epochs change no step, so the kills of
        both run in the job that saves them, and the module runs one AdptVFedConv job fewer.
        """

        def kill_three_times(run: ServiceRun, jobs: JobClient, job_id: str) -> None:
            # Phase 2: party 3 has the extractor and is fine-tuning (its one epoch not done); nothing is saved yet.
            log3 = run.root / "party-3.log"
            with frozen_when(
                run.procs["party-3"],
                lambda: _job_logged(log3, job_id, "extractor_received"),
                lambda: _job_logged(log3, job_id, "autoencoder_epoch"),
                "phase 2: party 3 fine-tuning",
            ):
                run.kill("party-3")
            restart_after_kill(run, "party-3")
            # Phase 3: the server trains its classifier alone (an epoch is a fraction of the
            # first, which held phases 1 and 2), so kill at once; the loss shows at its evaluation.
            wait_until(lambda: epochs_done(jobs, job_id) >= 1, "epoch 1", run)
            run.kill("party-3")
            restart_after_kill(run, "party-3")
            # Inside epoch 2, once resumed: its epochs are quick, so every checkpoint is kept, and
            # party 3 dies as soon as it has saved one inside epoch 2 after that resume: there it resumes.
            folder = run.root / "runs" / job_id / "party-3"
            wait_until(lambda: len(_resumed(run, job_id)) == 2, "the resume after the phase-3 kill", run)
            again = _resumed(run, job_id)[-1]

            def inside_epoch_2() -> bool:
                return any(p.epoch == 1 and p.batch > 0 and p > again for p in checkpoint_positions(folder))

            wait_until(inside_epoch_2, "a checkpoint inside epoch 2", run)
            run.kill("party-3")
            newest = checkpoint_positions(folder)[-1]
            restart_after_kill(run, "party-3")
            lines = finish_job(jobs, run, job_id)
            assert sum("waiting for party 3" in line for line in lines) == 3, lines
            assert _resumed(run, job_id)[-1] == newest, (_resumed(run, job_id), newest)
            assert newest.batch > 0, newest

        faulty = _adptvfedconv(
            service, pki, "kills-adptvfedconv", kill_three_times, checkpoint_every_steps=CONV_EVERY_STEPS
        )
        assert_same_model(faulty, clean_adptvfedconv)


def _resumed(run: ServiceRun, job_id: str) -> list[Position]:
    """Where the server resumed job ``job_id``, each time, in order."""
    return [
        Position(e["epoch"], e["batch"]) for e in log_events(run.logs["server"], "resumed") if e.get("job") == job_id
    ]
