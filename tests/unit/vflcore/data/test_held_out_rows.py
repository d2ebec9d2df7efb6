"""The rows a job does not train on: a dataset's own test IDs, the validation rows, and the pinned best checkpoint."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vflcore.data.checkpoints import checkpoint_positions, discard_after, pin, pinned, save_position
from vflcore.data.held_out import read_held_out_ids
from vflcore.errors import ConfigError, DataError
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.runtime.config import client_config_from, server_config_from
from vflcore.wire import serde
from vflcore.work_items import Checkpoint, HoldOut, Restore

JOB = JobSpec(job_id="j", seed=7, num_rows=5_000, test_fraction=0.2)
IDS = [f"kunde-{n:07d}-ümlaut@bank.example.org" for n in range(5_000)]


class TestHeldOutIds:
    def test_the_files_ids_are_found_among_the_aligned_rows(self, tmp_path: Path) -> None:
        path = tmp_path / "test_ids.txt"
        path.write_text(
            "\r\n".join([IDS[4_321], "", IDS[12], "nicht-ausgerichtet", IDS[12]]) + "\r\n", encoding="utf-8"
        )
        held = read_held_out_ids(path)
        assert held.rows(np.asarray(IDS, dtype=np.dtypes.StringDType())).tolist() == [12, 4_321]

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (None, "does not exist"),
            (b"\n\n", "holds no IDs"),
            (b"\xff\xfe", "is not UTF-8 text"),
        ],
    )
    def test_a_file_that_cannot_be_used_is_named(self, tmp_path: Path, content: bytes | None, message: str) -> None:
        path = tmp_path / "ids.txt"
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(DataError, match=rf"{path}: .*{message}"):
            read_held_out_ids(path)

    def test_none_or_all_aligned_rows_held_out_is_refused_without_naming_an_id(self, tmp_path: Path) -> None:
        aligned = np.asarray(IDS[:50], dtype=np.dtypes.StringDType())
        path = tmp_path / "ids.txt"
        path.write_text("\n".join(IDS[100:110]), encoding="utf-8")
        with pytest.raises(DataError, match="none of its 10 held-out IDs is among the 50 aligned rows") as none:
            read_held_out_ids(path).rows(aligned)
        path.write_text("\n".join(IDS[:50]), encoding="utf-8")
        with pytest.raises(DataError, match="all 50 aligned rows are held out") as every:
            read_held_out_ids(path).rows(aligned)
        assert "kunde" not in str(none.value) + str(every.value)

    def test_only_the_active_partys_dataset_takes_a_file(self, tmp_path: Path) -> None:
        config = server_config_from(
            {"datasets": {"d": {"path": "a.csv", "held_out_ids": "ids.txt"}}}, tmp_path / "server.toml"
        )
        assert config.datasets["d"].held_out_ids == tmp_path / "ids.txt"
        with pytest.raises(ConfigError, match=r"held_out_ids is the active party's \(vfl-server\) setting"):
            client_config_from({"data": {"path": "b.csv", "held_out_ids": "ids.txt"}}, tmp_path / "p.toml", party=2)


class TestSchedule:
    def test_given_test_rows_and_a_validation_share_split_every_row_once(self) -> None:
        given = np.arange(3, 5_000, 9)
        schedule = replace(JOB, validation_fraction=0.1).schedule(given)
        assert schedule.given and schedule.test_rows.tolist() == given.tolist()
        parts = np.concatenate([schedule.train_rows, schedule.valid_rows, schedule.test_rows])
        assert sorted(parts.tolist()) == list(range(5_000))
        assert len(schedule.valid_rows) == round(0.1 * (5_000 - len(given)))

    def test_validation_leaves_the_seeded_test_rows_as_they_were(self) -> None:
        plain, validated = JOB.schedule(), replace(JOB, validation_fraction=0.25).schedule()
        assert np.array_equal(plain.test_rows, validated.test_rows) and not plain.given
        assert np.array_equal(np.union1d(validated.train_rows, validated.valid_rows), plain.train_rows)

    def test_held_out_rows_out_of_range_or_all_rows_are_refused(self) -> None:
        with pytest.raises(ValueError, match="positions among the 5000 aligned rows"):
            JOB.schedule(np.array([5_000]))
        with pytest.raises(ValueError, match="none is left to train on"):
            JOB.schedule(np.arange(5_000))


class TestOnTheWire:
    def test_held_out_rows_travel_as_bits(self) -> None:
        rows = np.array([0, 9, 4_999, 1_234_567])
        message = serde.task_to_proto(HoldOut(4, rows))
        assert len(message.hold_out.rows) == (1_234_567 + 8) // 8
        back = serde.task_from_proto(message)
        assert isinstance(back, HoldOut) and back.rows.tolist() == rows.tolist()

    def test_a_checkpoint_names_the_best_and_a_restore_serves_it(self) -> None:
        for task in (
            Checkpoint(1, Position(3), best=Position(2)),
            Checkpoint(2, Position(3, 5)),
            Restore(3, Position(2), serve=True),
        ):
            assert serde.task_from_proto(serde.task_to_proto(task)) == task

    def test_bits_that_disagree_with_the_count_are_refused(self) -> None:
        message = serde.task_to_proto(HoldOut(4, np.array([3, 17])))
        message.hold_out.num_rows = 80
        with pytest.raises(ValueError, match="cannot hold the bits of 80 rows"):
            serde.task_from_proto(message)


def test_the_pinned_checkpoint_outlives_keep_and_goes_with_a_rollback_before_it(tmp_path: Path) -> None:
    pin(tmp_path, Position(2))
    for epoch in range(6):
        save_position(tmp_path, Position.after_epoch(epoch), {"w": epoch}, keep=1)
    assert checkpoint_positions(tmp_path) == [Position(2), Position(6)] and pinned(tmp_path) == Position(2)
    pin(tmp_path, Position(6))
    save_position(tmp_path, Position(7), {"w": 7}, keep=1)
    assert checkpoint_positions(tmp_path) == [Position(6), Position(7)]
    discard_after(tmp_path, Position(5))
    assert checkpoint_positions(tmp_path) == [] and pinned(tmp_path) is None
