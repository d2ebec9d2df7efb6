"""A job's own test rows, the best epoch chosen by validation, and test scores inside an epoch.

Real gRPC over mTLS: the active party serves on port 0 and two passive parties join from
threads, on the digits data (1,797 rows, long e-mail-like IDs).

- ``held_out_ids``: the aligned rows with the file's IDs are the test rows on every party, and
  only those rows are predicted in ``test_predictions.csv``.
- ``validation_fraction`` + ``patience`` (on the daemons below): training stops ``patience`` epochs
  after the lowest validation loss, every party serves that epoch's model (the final metrics are
  that epoch's test metrics), and its checkpoint outlives ``keep_checkpoints = 1`` (``best.json``).
- ``eval_every_rounds``: scores appear by the round, and the job trains exactly as without them
  (with dropout in the top model, whose mode the scoring must put back).
- A server killed mid-job (``vfl-server`` and two ``vfl-client`` processes, ``vfltesting.service``)
  resumes to the same best epoch and the same model as an uninterrupted run.
- A job whose training runs away after its best epoch (party 3's own model turns NaN in epoch 5)
  serves that epoch, and says so, instead of failing.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vflclient import JobClient, RunResult
from vflcore.data.checkpoints import checkpoint_positions, epoch_path, party_dir, pinned
from vflcore.data.held_out import read_held_out_ids
from vflcore.job.schedule import Position
from vfltesting.in_process import RunningJob, run_party_in_thread, start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki
from vfltesting.recovery import assert_same_model, job_outcome
from vfltesting.service import ServiceRun, finish_job, job_document, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _run(job: RunningJob, pki: Pki, data: Path, tmp_path: Path) -> dict[int, RunResult | BaseException]:
    waits = {party: run_party_in_thread(job, pki, data, tmp_path, party) for party in (2, 3)}
    job.summary(240)
    results = {party: wait(240) for party, wait in waits.items()}
    for party, result in results.items():
        assert isinstance(result, RunResult) and result.success, (party, result)
    return results


def test_the_datasets_own_test_rows_are_every_partys_test_rows(pki: Pki, digits_data: Path, tmp_path: Path) -> None:
    with (digits_data / "party1.csv").open(encoding="utf-8") as fh:
        ids = [row["id"] for row in csv.DictReader(fh)]
    chosen = ids[::7]  # one row in seven: not what a seeded 20 % would pick
    ids_file = tmp_path / "test_ids.txt"
    ids_file.write_text("\n".join([*chosen, "", "nobody-else-has-this-id-ü"]) + "\n", encoding="utf-8")
    job = start_job(
        pki,
        digits_data,
        tmp_path,
        replace(SMALL_JOB, job_id="held-out", epochs=1),
        held_out=read_held_out_ids(ids_file),
    )
    _run(job, pki, digits_data, tmp_path)
    active = job.active
    aligned = [str(i) for i in active.table.ids]
    expected = [row for row, id_ in enumerate(aligned) if id_ in set(chosen)]
    assert active.schedule.given and active.schedule.test_rows.tolist() == expected
    assert 0 < len(expected) < len(chosen)  # the IDs some passive party lacks are not aligned
    for party in (2, 3):
        schedule = job.passive[party].schedule
        assert schedule is not None and schedule.test_rows.tolist() == expected, party
        assert np.array_equal(schedule.train_rows, active.schedule.train_rows), party
    with (active.run_dir / "test_predictions.csv").open(encoding="utf-8") as fh:
        assert sorted(row["id"] for row in csv.DictReader(fh)) == sorted(aligned[row] for row in expected)
    split = json.loads((active.run_dir / "summary.json").read_text())["split"]
    assert split == {
        "train_rows": len(aligned) - len(expected),
        "validation_rows": 0,
        "test_rows": len(expected),
        "test_rows_from": str(ids_file),
    }


def test_scores_by_the_round_change_nothing_in_training(pki: Pki, digits_data: Path, tmp_path: Path) -> None:
    spec = replace(SMALL_JOB, job_id="rounds", epochs=2, eval_every_rounds=5)
    scored = start_job(pki, digits_data, tmp_path / "scored", spec, top_dropout=0.3)
    _run(scored, pki, digits_data, tmp_path / "scored")
    plain = start_job(pki, digits_data, tmp_path / "plain", replace(spec, eval_every_rounds=0), top_dropout=0.3)
    _run(plain, pki, digits_data, tmp_path / "plain")
    with_scores = json.loads((scored.active.run_dir / "summary.json").read_text())
    without = json.loads((plain.active.run_dir / "summary.json").read_text())
    assert with_scores["step_losses"] == pytest.approx(without["step_losses"], rel=1e-6)
    assert with_scores["final_metrics"] == pytest.approx(without["final_metrics"], rel=1e-6)
    per_epoch = len(scored.active.schedule.batches(0))
    for epoch, report in enumerate(with_scores["epochs"]):
        rounds = [score["round"] for score in report["rounds"]]
        inside = range(epoch * per_epoch + 1, (epoch + 1) * per_epoch)
        assert rounds == [r for r in inside if r % 5 == 0], (epoch, rounds)
        assert all(0.0 <= score["metrics"]["accuracy"] <= 1.0 for score in report["rounds"])
    assert without["epochs"][0]["rounds"] == []


@pytest.fixture(scope="module")
def daemons(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """``vfl-server`` and two ``vfl-client`` daemons (all ``keep_checkpoints = 1``) with a ``[models] runaway``,
    for the module's two tests on processes: each runs its jobs under their own ids (an id changes no seed or
    row order). One set of daemons for both, not one each: three daemon starts fewer (about 3 CPU-s)."""
    models = {"models": {"runaway": "vfltesting.models:runaway_bottom"}}
    root = tmp_path_factory.mktemp("daemons")
    keep = {"keep_checkpoints": 1}
    run = ServiceRun(
        root, pki, digits_data, serving=False, server_settings=keep, client_settings=keep, client_tables=models
    )
    with run.started():
        yield run


def test_the_best_epoch_is_kept_served_and_named_and_a_server_killed_mid_job_resumes_to_it(
    daemons: ServiceRun, pki: Pki
) -> None:
    """The uninterrupted run: training stops ``patience`` epochs after the lowest validation loss, every party
    serves that epoch's model (the final metrics are its test metrics) and keeps its checkpoint past
    ``keep_checkpoints = 1``. Then kill -9 of vfl-server after epoch 3's checkpoint and a restart: the epochs it
    had scored come back from its checkpoint, the pinned best survives, and the job stops and serves exactly as
    the uninterrupted run.

    One test for what were two: the best epoch's had an in-process job of its own, of the same kind (Adam at
    0.05 over-fits the digits within a few epochs: the validation loss turns up), whose checks now
    read the daemons' uninterrupted run (this file 43.6 -> 36.8 CPU-s, user+sys, pytest -n 0, 2026-11-29).
    """
    patience = 3
    job = {"epochs": 14, "batch_size": 64, "learning_rate": 0.05, "validation_fraction": 0.2, "patience": patience}
    outcomes, summaries = [], []
    # Both runs on one set of daemons, each job under its own id.
    run = daemons
    for job_id in ("best-clean", "best-resumed"):
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            jobs.submit(job_document(job_id, "splitnn", **job))
            if job_id == "best-resumed":
                saved = epoch_path(party_dir(run.root / "runs", job_id, 1), 2)
                wait_until(saved.exists, "the server's checkpoint of epoch 3", run)
                run.kill("server")
                run.start_server(f"127.0.0.1:{run.port}")
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            lines = finish_job(jobs, run, job_id)
        outcomes.append(job_outcome(run.root / "runs", job_id))
        summaries.append(json.loads((party_dir(run.root / "runs", job_id, 1) / "summary.json").read_text()))
    assert any("resuming after" in line for line in lines), lines
    clean, killed = summaries
    epochs = clean["epochs"]
    losses = [e["valid_loss"] for e in epochs]
    best = clean["best_epoch"]
    assert best == int(np.argmin(losses)) and losses.count(losses[best]) == 1
    assert clean["stopped_early"] and len(epochs) == best + 1 + patience < job["epochs"]
    assert clean["split"]["validation_rows"] == round(0.2 * clean["split"]["train_rows"] / 0.8)
    # The served model is the best epoch's: its test metrics are that epoch's, not the last one's.
    assert clean["final_metrics"] == pytest.approx(epochs[best]["metrics"], rel=1e-6)
    served = Position.after_epoch(best)
    for party in (1, 2, 3):
        folder = party_dir(run.root / "runs", "best-clean", party)
        assert pinned(folder) == served, party
        kept = checkpoint_positions(folder)
        assert served in kept and Position.after_epoch(len(epochs) - 1) in kept, (party, kept)
        assert (folder / "model.onnx").is_file(), party
    assert killed["best_epoch"] == clean["best_epoch"] and killed["stopped_early"] == clean["stopped_early"]
    assert [e["valid_loss"] for e in killed["epochs"]] == pytest.approx([e["valid_loss"] for e in clean["epochs"]])
    assert killed["final_metrics"] == pytest.approx(clean["final_metrics"], rel=1e-6)
    assert_same_model(outcomes[1], outcomes[0])


def test_a_job_that_runs_away_after_its_best_epoch_serves_that_epoch(daemons: ServiceRun, pki: Pki) -> None:
    """Party 3's own model turns NaN at its 51st step (``vfltesting.models:runaway_bottom``): party 3 reports the
    divergence, party 2 is stopped in its step, and both come back to load and serve the best epoch."""
    job = {"epochs": 8, "batch_size": 64, "learning_rate": 0.05, "validation_fraction": 0.2, "models": {"3": "runaway"}}
    run = daemons
    with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
        jobs.submit(job_document("runs-away", "splitnn", **job))
        lines = finish_job(jobs, run, "runs-away")
        record = jobs.get("runs-away")
    after = jobs_after(run, pki)
    runs = run.root / "runs"
    summary = json.loads((party_dir(runs, "runs-away", 1) / "summary.json").read_text())
    epochs = summary["epochs"]
    per_epoch = -(-summary["split"]["train_rows"] // 64)
    epoch, batch = divmod(50, per_epoch)  # 50 good steps; the 51st is NaN
    diverged = f"training diverged at epoch {epoch + 1}, batch {batch + 1}: party 3's embedding is not finite"
    assert len(epochs) == epoch >= 2 and summary["diverged"].startswith(diverged), summary
    best = summary["best_epoch"]
    assert best == int(np.argmin([e["valid_loss"] for e in epochs])), summary
    assert summary["stopped_early"], summary
    assert record.state_message == f"training diverged; the best epoch by validation ({best + 1}) was served"
    assert any(line.startswith("runs-away warning: " + diverged) for line in lines), lines  # `vfl-jobs watch`
    assert any("runs-away state waiting: " + diverged in line for line in lines), lines
    # The served model is the best epoch's: scored again on the test rows, it gives that epoch's metrics.
    assert summary["final_metrics"] == pytest.approx(epochs[best]["metrics"], rel=1e-6)
    for party in (1, 2, 3):
        folder = party_dir(runs, "runs-away", party)
        assert pinned(folder) == Position.after_epoch(best), party
        assert (folder / "model.onnx").is_file(), party
    assert after == "finished"


def jobs_after(run: ServiceRun, pki: Pki) -> str:
    """The state of a plain job run next on the same daemons: they are ready for it."""
    with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
        jobs.submit(job_document("after-runaway", "splitnn", epochs=1, batch_size=64))
        for _ in jobs.watch("after-runaway"):
            pass
        return jobs.get("after-runaway").state
