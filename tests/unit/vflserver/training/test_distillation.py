"""Distillation without any server: ``[distill]`` checked at submission, the student's loss, and its resumption.

The student trains on the active party's real digits table (image rows 0-2) against a teacher's
outputs held in an array, through the same ``Distillation`` the active party runs after a job. A
student stopped (as a cancelled or killed job stops) and resumed from its checkpoints must end
with the uninterrupted student's weights, whether it stopped at an epoch's end or inside one.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vflcore.data.checkpoints import LATEST, checkpoint_positions, load_checkpoint, position_path
from vflcore.data.tables import PartyTable, read_party_csv
from vflcore.errors import ConfigError, JobAborted
from vflcore.job.distill import DistillSpec, distill_from_table
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.ml.losses import label_tensor
from vflcore.runtime.config import DataSource
from vflserver.inference.onnx_model import is_standalone, read_info
from vflserver.plan.admission import check_models, read_active_table
from vflserver.plan.document import plan_from_document
from vflserver.training.distillation import STUDENT_DIR, TEACHER_FILE, Distillation
from vflserver.training.student import distillation_loss

JOB = JobSpec(job_id="distil", seed=3, epochs=4, batch_size=64, embedding_dim=8, bottom_hidden=(32,), num_outputs=10)
TOP_HIDDEN = (32,)
TOP_DROPOUT = 0.25  # the student's dropout masks come from torch's generator: a resumed student must restore it


# ---- [distill] at submission ------------------------------------------------------------------


def _document(distill: Any, **job: Any) -> dict[str, Any]:
    return {"job": {"algorithm": "splitnn", "passive_parties": [2, 3], **job}, "distill": distill}


def _submit(document: dict[str, Any], data: Path) -> None:
    """What a submission checks (``vflserver.jobs.control.submit_job``): the plan, then the active party's table."""
    plan = plan_from_document(document, default_join_timeout_s=60)
    datasets = {"default": DataSource(data / "party1.csv", "id", "label")}
    check_models(plan, read_active_table(plan, datasets))


class TestSettings:
    def test_an_empty_table_distils_with_the_defaults(self) -> None:
        plan = plan_from_document(_document({}), default_join_timeout_s=60)
        assert plan.distill == DistillSpec()
        assert plan.distill.student_epochs(7) == 7

    def test_no_table_no_student(self) -> None:
        plan = plan_from_document({"job": {"algorithm": "splitnn"}}, default_join_timeout_s=60)
        assert plan.distill is None

    def test_every_setting_is_read(self) -> None:
        table = {"temperature": 4, "label_weight": 0.25, "epochs": 9, "student_factory": "vfltesting.models:mlp_top"}
        spec = plan_from_document(_document(table), default_join_timeout_s=60).distill
        assert spec == DistillSpec(
            temperature=4.0, label_weight=0.25, epochs=9, student_factory="vfltesting.models:mlp_top"
        )
        assert spec.student_epochs(7) == 9

    @pytest.mark.parametrize(
        ("table", "job", "message"),
        [
            ({"temprature": 2}, {}, r"\[distill\] has no key 'temprature'; the keys are"),
            ({"temperature": 0}, {}, r"\[distill\] temperature = 0; give a number above 0"),
            ({"temperature": "hot"}, {}, r"\[distill\] temperature = 'hot'; give a number above 0"),
            ({"temperature": float("inf")}, {}, r"\[distill\] temperature = inf must be a finite number"),
            ({"temperature": True}, {}, r"\[distill\] temperature = True; give a number above 0"),
            ({"temperature": 2}, {"task": "regression"}, r"\[distill\] temperature softens class probabilities"),
            ({"label_weight": 1.5}, {}, r"\[distill\] label_weight = 1.5; give a weight in \[0, 1\]"),
            ({"label_weight": -0.1}, {}, r"\[distill\] label_weight = -0.1; give a weight in \[0, 1\]"),
            ({"epochs": -1}, {}, r"\[distill\] epochs = -1; give a whole number of epochs"),
            ({"epochs": 2.5}, {}, r"\[distill\] epochs = 2.5; give a whole number of epochs"),
            ({"epochs": True}, {}, r"\[distill\] epochs = True; give a whole number of epochs"),
            ({"student_factory": "mlp"}, {}, r"\[distill\] student_factory = 'mlp'; give 'package.module:function'"),
            ({"student_factory": 3}, {}, r"\[distill\] student_factory = 3; give 'package.module:function'"),
            ({}, {"psi_only": True}, r"\[distill\] needs a trained model, and a psi_only job trains none"),
            ("yes", {}, r"\[distill\] must be a table of settings"),
        ],
    )
    def test_a_bad_setting_is_refused_naming_the_key(self, table: Any, job: dict[str, Any], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            plan_from_document(_document(table, **job), default_join_timeout_s=60)

    @pytest.mark.parametrize(
        ("factory", "message"),
        [
            ("tests.nowhere:student", r"\[distill\] student_factory: .*tests\.nowhere"),
            ("vfltesting.models:one_too_wide", r"\[distill\] student_factory = .* returns \[4, 11\]; the student must"),
            ("vfltesting.models:not_a_model", r"\[distill\] student_factory = .*calling it with \(24, 10\) failed"),
        ],
    )
    def test_a_student_factory_that_cannot_work_is_refused_at_submission(
        self, factory: str, message: str, digits_data: Path
    ) -> None:
        with pytest.raises(ConfigError, match=message):
            _submit(_document({"student_factory": factory}), digits_data)

    def test_a_student_factory_that_fits_is_accepted(self, digits_data: Path) -> None:
        _submit(_document({"student_factory": "vfltesting.models:mlp_top"}), digits_data)

    def test_an_active_party_without_features_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "party1.csv").write_text("id,label\na,0\nb,1\n")
        with pytest.raises(ConfigError, match=r"\[distill\] trains a student on the active party's own features"):
            _submit(_document({}), tmp_path)

    def test_the_settings_table_reads_alone(self) -> None:
        assert distill_from_table({}) == DistillSpec()
        assert distill_from_table({"label_weight": 1}, task="regression").label_weight == 1.0


# ---- the student's loss -----------------------------------------------------------------------


class TestLoss:
    student = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3]])
    teacher = torch.tensor([[3.0, 0.0, -2.0], [-1.0, 2.0, 0.0]])
    labels = torch.tensor([0, 2])

    def test_labels_alone_is_plain_cross_entropy(self) -> None:
        got = distillation_loss("classification", self.student, self.teacher, self.labels, DistillSpec(label_weight=1))
        assert torch.equal(got, F.cross_entropy(self.student, self.labels))

    def test_teacher_alone_is_the_scaled_divergence_of_the_softened_distributions(self) -> None:
        spec = DistillSpec(label_weight=0.0, temperature=3.0)
        got = distillation_loss("classification", self.student, self.teacher, self.labels, spec)
        p, q = torch.softmax(self.teacher / 3, dim=1), torch.softmax(self.student / 3, dim=1)
        expected = 9 * (p * (p.log() - q.log())).sum(dim=1).mean()
        assert torch.allclose(got, expected, atol=1e-6)

    def test_a_student_equal_to_its_teacher_pays_only_for_the_labels(self) -> None:
        spec = DistillSpec(label_weight=0.5)
        got = distillation_loss("classification", self.teacher, self.teacher, self.labels, spec)
        assert torch.allclose(got, 0.5 * F.cross_entropy(self.teacher, self.labels), atol=1e-6)

    def test_regression_mixes_the_two_squared_errors(self) -> None:
        student, teacher = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.0], [2.0]])
        target = torch.tensor([[1.0], [0.0]])
        got = distillation_loss("regression", student, teacher, target, DistillSpec(label_weight=0.25))
        assert torch.allclose(got, torch.tensor(0.25 * 2.0 + 0.75 * 0.5))


# ---- the student's run and its resumption -----------------------------------------------------


@pytest.fixture(scope="module")
def active(digits_data: Path) -> PartyTable:
    return read_party_csv(digits_data / "party1.csv", label_column="label")


def _teacher(job: JobSpec) -> np.ndarray:
    """Fixed outputs for every row, as a federated model would give them (seeded, so every run sees the same)."""
    return np.random.default_rng(7).normal(size=(job.num_rows, job.num_outputs)).astype(np.float32)


class _Asked:
    """The federated model as ``Distillation`` asks it: counts how many rows it was asked for."""

    def __init__(self, outputs: np.ndarray) -> None:
        self.outputs, self.rows = outputs, 0

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        self.rows += len(rows)
        return self.outputs[rows]


def _distillation(
    table: PartyTable,
    folder: Path,
    stop: threading.Event | None = None,
    *,
    every: int = 0,
    spec: DistillSpec = DistillSpec(epochs=4),  # noqa: B008 - frozen, never changed
    dropout: float = TOP_DROPOUT,
    **job: Any,
) -> Distillation:
    """``JOB`` (``job`` overrides its fields) distilled on ``table`` into ``folder``, as the active party does it."""
    spec_job = replace(JOB, num_rows=len(table.ids), checkpoint_every_steps=every, **job)
    labels, _ = label_tensor(spec_job.task, torch.from_numpy(np.asarray(table.labels, dtype=np.float64)))
    return Distillation(
        spec_job,
        spec,
        aligned=table,
        features=torch.from_numpy(np.ascontiguousarray(table.features, dtype=np.float32)),
        train_labels=labels,
        labels=labels,
        party_dir=folder,
        repository_root=folder / "model_repository",
        keep_checkpoints=20,
        top_hidden=TOP_HIDDEN,
        top_dropout=dropout,
        factory=None,
        stop_event=stop or threading.Event(),
    )


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in load_checkpoint(folder / STUDENT_DIR / LATEST)["algorithm"]["model"].items()}


def _run_stopped_after(table: PartyTable, folder: Path, epochs_done: int, *, every: int = 0) -> None:
    """Run until ``epochs_done`` epochs are saved, then stop as a cancelled job does (JobAborted)."""
    stop = threading.Event()
    distillation = _distillation(table, folder, stop, every=every)
    outputs = distillation.teacher_outputs(_Asked(_teacher(distillation.job)), None, afresh=True)

    def on_epoch(report: Any) -> None:
        if report.epoch + 1 == epochs_done:
            stop.set()

    with pytest.raises(JobAborted):
        distillation.run(outputs, on_epoch=on_epoch)


@pytest.fixture(scope="module")
def uninterrupted(active: PartyTable, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    distillation = _distillation(active, folder)
    outputs = distillation.teacher_outputs(_Asked(_teacher(distillation.job)), None, afresh=True)
    summary = distillation.run(outputs)
    assert [report.epoch for report in summary.epochs] == [0, 1, 2, 3]
    return folder, [report.train_loss for report in summary.epochs]


class TestRun:
    def test_the_teacher_is_asked_for_every_row_once_and_kept_to_the_owner(
        self, active: PartyTable, tmp_path: Path
    ) -> None:
        distillation = _distillation(active, tmp_path)
        asked = _Asked(_teacher(distillation.job))
        outputs = distillation.teacher_outputs(asked, None, afresh=True)
        assert asked.rows == len(active.ids) and np.array_equal(outputs, asked.outputs)
        path = tmp_path / STUDENT_DIR / TEACHER_FILE
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

        again = _Asked(asked.outputs)
        assert np.array_equal(distillation.teacher_outputs(again, None, afresh=False), outputs)
        assert again.rows == 0  # the saved outputs serve a resumed job

        test_rows = distillation.schedule.test_rows
        held_out = asked.outputs[test_rows]
        fresh = _Asked(asked.outputs)
        distillation.teacher_outputs(fresh, held_out, afresh=True)  # the final evaluation's output is reused
        assert fresh.rows == len(distillation.schedule.train_rows)

    def test_damaged_teacher_outputs_are_asked_for_again(self, active: PartyTable, tmp_path: Path) -> None:
        distillation = _distillation(active, tmp_path)
        asked = _Asked(_teacher(distillation.job))
        distillation.teacher_outputs(asked, None, afresh=True)
        (tmp_path / STUDENT_DIR / TEACHER_FILE).write_bytes(b"not numpy")
        again = _Asked(asked.outputs)
        assert np.array_equal(distillation.teacher_outputs(again, None, afresh=False), asked.outputs)
        assert again.rows == len(active.ids)

    def test_the_student_is_a_standalone_model_with_its_own_name(self, uninterrupted: tuple[Path, list[float]]) -> None:
        folder, _ = uninterrupted
        model = folder / STUDENT_DIR / "model.onnx"
        assert is_standalone(model)
        info = read_info(model)
        assert (info.model_name, info.job_id, info.algorithm) == ("distil-student", "distil-student", "splitnn-student")
        assert (folder / "model_repository" / "distil-student" / "1" / "model.onnx").exists()

    @pytest.mark.parametrize("epochs_done", [1, 3])
    def test_stopped_at_an_epochs_end_and_resumed_the_student_is_the_same(
        self, epochs_done: int, active: PartyTable, uninterrupted: tuple[Path, list[float]], tmp_path: Path
    ) -> None:
        _run_stopped_after(active, tmp_path, epochs_done)
        assert checkpoint_positions(tmp_path / STUDENT_DIR)[-1] == Position(epochs_done, 0)
        distillation = _distillation(active, tmp_path)
        outputs = distillation.teacher_outputs(_Asked(np.zeros((0, 10), np.float32)), None, afresh=False)
        summary = distillation.run(outputs)
        assert [r.train_loss for r in summary.epochs] == pytest.approx(uninterrupted[1], abs=1e-6)
        _assert_same(_weights(tmp_path), _weights(uninterrupted[0]))

    def test_resumed_inside_an_epoch_the_student_is_the_same(
        self, active: PartyTable, uninterrupted: tuple[Path, list[float]], tmp_path: Path
    ) -> None:
        _run_stopped_after(active, tmp_path, 2, every=7)
        folder = tmp_path / STUDENT_DIR
        position_path(folder, Position(2, 0)).unlink()  # the end of epoch 2 lost: the newest is inside it
        newest = checkpoint_positions(folder)[-1]
        assert newest.epoch == 1 and newest.batch > 0, newest
        distillation = _distillation(active, tmp_path, every=7)
        outputs = distillation.teacher_outputs(_Asked(np.zeros((0, 10), np.float32)), None, afresh=False)
        summary = distillation.run(outputs)
        assert [r.train_loss for r in summary.epochs][1:] == pytest.approx(uninterrupted[1][1:], abs=1e-6)
        _assert_same(_weights(tmp_path), _weights(uninterrupted[0]))

    def test_cancelled_inside_an_epoch_it_stops_at_the_next_step_and_resumes_to_the_same_student(
        self, active: PartyTable, uninterrupted: tuple[Path, list[float]], tmp_path: Path
    ) -> None:
        """The stop flag is read after every student step: a job cancelled mid-epoch stops there, not at its end."""
        stop = _StopAfter(checks=20)  # the run's first read is before epoch 1; the 20th is after step 19
        distillation = _distillation(active, tmp_path, stop, every=7)
        outputs = distillation.teacher_outputs(_Asked(_teacher(distillation.job)), None, afresh=True)
        with pytest.raises(JobAborted):
            distillation.run(outputs)
        assert checkpoint_positions(tmp_path / STUDENT_DIR) == [Position(0, 7), Position(0, 14)]
        resumed = _distillation(active, tmp_path, every=7)
        resumed.run(resumed.teacher_outputs(_Asked(np.zeros((0, 10), np.float32)), None, afresh=False))
        _assert_same(_weights(tmp_path), _weights(uninterrupted[0]))

    def test_a_checkpoint_taught_by_another_teacher_is_not_resumed(
        self, active: PartyTable, uninterrupted: tuple[Path, list[float]], tmp_path: Path
    ) -> None:
        _run_stopped_after(active, tmp_path, 2)
        distillation = _distillation(active, tmp_path)
        saved = distillation.teacher_outputs(_Asked(np.zeros((0, 10), np.float32)), None, afresh=False)
        summary = distillation.run(saved + 1)  # another teacher: its student starts from scratch
        assert len(summary.epochs) == 4
        assert [r.train_loss for r in summary.epochs] != uninterrupted[1]


class _StopAfter(threading.Event):
    """A stop flag that is raised by the ``checks``-th look at it: a cancel that lands at a known step."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.left = checks

    def is_set(self) -> bool:
        self.left -= 1
        return self.left <= 0


def _assert_same(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    worst = max(float((got[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-6, worst


@pytest.mark.cuda
def test_a_student_on_the_gpu_trains_close_to_the_cpu_one(
    active: PartyTable, uninterrupted: tuple[Path, list[float]], tmp_path: Path
) -> None:
    """``[compute] device = "cuda"``: the student trains where the active party's features are, and exports.

    Other kernels sum in another order, so the epochs' losses are close to the CPU run's, not equal.
    """
    distillation = _distillation(active, tmp_path)
    distillation.features = distillation.features.to("cuda")
    outputs = distillation.teacher_outputs(_Asked(_teacher(distillation.job)), None, afresh=True)
    summary = distillation.run(outputs)
    assert [r.train_loss for r in summary.epochs] == pytest.approx(uninterrupted[1], rel=1e-2)
    assert is_standalone(tmp_path / STUDENT_DIR / "model.onnx")


def test_a_regression_student_trains_against_values_and_serves_a_prediction(tmp_path: Path) -> None:
    """A regression job's student: the teacher's values and the targets, squared errors, one ``prediction`` out."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(120, 3)).astype(np.float32)
    target = features @ np.array([1.0, -2.0, 0.5], dtype=np.float32) + rng.normal(scale=0.1, size=120)
    ids = np.asarray([f"r{i:03d}" for i in range(120)], dtype=np.dtypes.StringDType())
    table = PartyTable(ids, features, ("a", "b", "c"), target.astype(np.float64), tmp_path / "party1.csv")
    regression = {"task": "regression", "num_outputs": 1, "epochs": 30, "learning_rate": 0.01}
    distillation = _distillation(table, tmp_path, spec=DistillSpec(), dropout=0.0, **regression)
    teacher = target.astype(np.float32).reshape(-1, 1)  # a perfect teacher: its values are the targets
    summary = distillation.run(distillation.teacher_outputs(_Asked(teacher), None, afresh=True))
    assert summary.final_metrics["r2"] > 0.8, summary.final_metrics
    assert "teacher_agreement" not in summary.final_metrics  # no classes to agree on
    info = read_info(tmp_path / STUDENT_DIR / "model.onnx")
    assert (info.task, info.num_outputs) == ("regression", 1)
