"""Checkpoint files: atomic writes, retention of the newest few, and skipping a damaged file."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from structlog.testing import capture_logs

from vflcore.data import checkpoints
from vflcore.data.checkpoints import (
    LATEST,
    checkpoint_epochs,
    checkpoint_positions,
    discard_after,
    epoch_path,
    load_checkpoint,
    load_position,
    position_path,
    readable_checkpoints,
    save_checkpoint,
    save_position,
)
from vflcore.errors import CheckpointError
from vflcore.job.schedule import Position


def _state(epoch: int) -> dict[str, torch.Tensor]:
    return {"weight": torch.full((4, 3), float(epoch))}


def _save_epochs(directory: Path, epochs: range, keep: int = 2) -> None:
    for epoch in epochs:
        save_checkpoint(directory, epoch, _state(epoch), keep=keep)


class TestSaveCheckpoint:
    @pytest.mark.parametrize("keep", [1, 2, 3])
    def test_keeps_exactly_the_newest_epochs(self, tmp_path: Path, keep: int) -> None:
        """After five saves only the newest ``keep`` epoch files are left, beside latest.pt."""
        _save_epochs(tmp_path, range(5), keep=keep)
        newest = list(range(5))[-keep:]
        assert checkpoint_epochs(tmp_path) == newest
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"epoch-{e:04d}.pt" for e in newest] + [LATEST]

    def test_default_keeps_two(self, tmp_path: Path) -> None:
        """Without ``keep`` the newest two epochs stay."""
        for epoch in range(5):
            save_checkpoint(tmp_path, epoch, _state(epoch))
        assert checkpoint_epochs(tmp_path) == [3, 4]

    def test_latest_is_the_newest_epoch(self, tmp_path: Path) -> None:
        """latest.pt holds the same bytes as the newest epoch file, and loads as that epoch."""
        _save_epochs(tmp_path, range(5))
        assert (tmp_path / LATEST).read_bytes() == epoch_path(tmp_path, 4).read_bytes()
        latest = load_checkpoint(tmp_path / LATEST)
        assert latest["epoch"] == 4 and torch.equal(latest["weight"], _state(4)["weight"])

    @pytest.mark.parametrize("keep", [0, -1])
    def test_keep_below_one_is_refused(self, tmp_path: Path, keep: int) -> None:
        """``keep`` < 1 is a ValueError, and nothing is written."""
        with pytest.raises(ValueError, match="keep must be at least 1"):
            save_checkpoint(tmp_path / "party-2", 0, _state(0), keep=keep)
        assert not (tmp_path / "party-2").exists()

    def test_file_just_written_is_never_deleted(self, tmp_path: Path) -> None:
        """Saving an epoch older than those present keeps the new file, which the next resume may need."""
        _save_epochs(tmp_path, range(5, 7))
        save_checkpoint(tmp_path, 2, _state(2), keep=2)
        assert 2 in checkpoint_epochs(tmp_path)
        assert load_checkpoint(tmp_path / LATEST)["epoch"] == 2

    def test_temp_files_left_by_a_crash_are_removed(self, tmp_path: Path) -> None:
        """A checkpoint's temporary file from a killed writer goes at the next save; other files stay."""
        leftovers = [tmp_path / ".epoch-0003.pt.k2j4.tmp", tmp_path / f".{LATEST}.x9q1.tmp"]
        other = tmp_path / ".model.safetensors.abcd"
        for path in [*leftovers, other]:
            path.write_bytes(b"partial")
        save_checkpoint(tmp_path, 0, _state(0))
        assert not any(p.exists() for p in leftovers) and other.exists()

    def test_each_file_then_its_folder_is_synced(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each of the two writes fsyncs the file before the rename and the folder after it."""
        synced: list[str] = []
        real_fsync = os.fsync

        def recording_fsync(fd: int) -> None:
            synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
            real_fsync(fd)

        monkeypatch.setattr(checkpoints.os, "fsync", recording_fsync)
        save_checkpoint(tmp_path, 0, _state(0))
        assert synced == ["file", "folder", "file", "folder"]


class TestCheckpointEpochs:
    def test_lists_epoch_files_ascending(self, tmp_path: Path) -> None:
        """Only ``epoch-NNNN.pt`` names count, sorted by epoch number; latest.pt and temp files do not."""
        for name in ["epoch-0010.pt", "epoch-0002.pt", "epoch-10000.pt", LATEST, ".epoch-0003.pt.ab.tmp", "x.pt"]:
            (tmp_path / name).write_bytes(b"")
        assert checkpoint_epochs(tmp_path) == [2, 10, 10000]

    def test_missing_folder_has_none(self, tmp_path: Path) -> None:
        """A folder that does not exist holds no epochs."""
        assert checkpoint_epochs(tmp_path / "nowhere") == []


class TestReadableCheckpoints:
    def test_lists_every_epoch_whose_file_loads(self, tmp_path: Path) -> None:
        """With every file whole, every kept epoch is offered, ascending."""
        _save_epochs(tmp_path, range(4), keep=3)
        assert readable_checkpoints(tmp_path) == [Position(2), Position(3), Position(4)]

    @pytest.mark.parametrize(
        "damage",
        [
            pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
            pytest.param(lambda data: data[:-1], id="last-byte-lost"),
            pytest.param(lambda data: b"", id="empty"),
            pytest.param(lambda data: b"\x8f not a checkpoint \x00" * 64, id="garbage"),
        ],
    )
    def test_damaged_newest_is_left_out(self, tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
        """A newest file that does not load is left out with a warning naming it; the older epoch stays."""
        _save_epochs(tmp_path, range(3))
        newest = epoch_path(tmp_path, 2)
        newest.write_bytes(damage(newest.read_bytes()))
        with capture_logs() as logs:
            assert readable_checkpoints(tmp_path) == [Position.after_epoch(1)]
        [warning] = [e for e in logs if e["event"] == "checkpoint_unreadable"]
        assert warning["log_level"] == "warning" and warning["path"] == str(newest) and warning["reason"]
        assert torch.equal(load_position(tmp_path, Position.after_epoch(1))["weight"], _state(1)["weight"])

    def test_file_holding_another_epoch_is_left_out(self, tmp_path: Path) -> None:
        """A file whose content is another epoch's (a misplaced copy) is not trusted under this name."""
        _save_epochs(tmp_path, range(3))
        epoch_path(tmp_path, 2).write_bytes(epoch_path(tmp_path, 1).read_bytes())
        with capture_logs() as logs:
            assert readable_checkpoints(tmp_path) == [Position.after_epoch(1)]
        assert [e["reason"] for e in logs] == ["it holds position (2, 0), not (3, 0)"]

    def test_empty_folder_has_none(self, tmp_path: Path) -> None:
        """An empty folder, or one that does not exist, offers nothing."""
        assert readable_checkpoints(tmp_path) == []
        assert readable_checkpoints(tmp_path / "nowhere") == []


class TestLoadEpoch:
    def test_damaged_file_is_a_checkpoint_error_naming_it(self, tmp_path: Path) -> None:
        """Loading a damaged checkpoint raises CheckpointError with the file's path and the epoch, counted from 1."""
        _save_epochs(tmp_path, range(2))
        epoch_path(tmp_path, 1).write_bytes(b"garbage")
        with pytest.raises(CheckpointError, match=r"epoch-0001\.pt.*the end of epoch 2"):
            load_position(tmp_path, Position.after_epoch(1))

    def test_missing_file_is_a_checkpoint_error(self, tmp_path: Path) -> None:
        """An epoch that was never saved (or was pruned) raises CheckpointError."""
        with pytest.raises(CheckpointError, match="epoch 4"):
            load_position(tmp_path, Position.after_epoch(3))


class TestDiscardAfter:
    def test_rollback_deletes_newer_epochs_and_points_latest_at_the_kept_one(self, tmp_path: Path) -> None:
        """discard_after(1) keeps epochs up to 1; latest.pt then holds epoch 1."""
        _save_epochs(tmp_path, range(4), keep=4)
        discard_after(tmp_path, Position.after_epoch(1))
        assert checkpoint_epochs(tmp_path) == [0, 1]
        assert load_checkpoint(tmp_path / LATEST)["epoch"] == 1

    def test_minus_one_deletes_everything(self, tmp_path: Path) -> None:
        """A fresh start (-1) leaves no epoch file and no latest.pt: a reused job id starts clean."""
        _save_epochs(tmp_path, range(3))
        discard_after(tmp_path, Position(0, 0))
        assert checkpoint_epochs(tmp_path) == [] and not (tmp_path / LATEST).exists()

    def test_missing_folder_is_fine(self, tmp_path: Path) -> None:
        """Nothing saved yet: nothing to discard."""
        discard_after(tmp_path / "nowhere", Position(0, 0))


class TestInsideAnEpoch:
    def test_positions_sort_in_training_order_and_share_the_keep_limit(self, tmp_path: Path) -> None:
        """End of epoch 1, 40 and 80 batches into epoch 2, end of epoch 2: keep 3 leaves the newest three."""
        saves = [Position(1, 0), Position(1, 40), Position(1, 80), Position(2, 0)]
        for position in saves:
            save_position(tmp_path, position, _state(position.epoch), keep=3)
        assert checkpoint_positions(tmp_path) == saves[1:]
        assert position_path(tmp_path, Position(1, 40)).name == "epoch-0001-batch-00040.pt"
        assert load_checkpoint(tmp_path / LATEST)["position"] == (2, 0)

    def test_rollback_inside_an_epoch_keeps_what_came_before(self, tmp_path: Path) -> None:
        """discard_after(epoch 2 after 40 batches) deletes the later mid-epoch file and the epoch's end."""
        for position in [Position(1, 0), Position(1, 40), Position(1, 80), Position(2, 0)]:
            save_position(tmp_path, position, _state(position.epoch), keep=4)
        discard_after(tmp_path, Position(1, 40))
        assert checkpoint_positions(tmp_path) == [Position(1, 0), Position(1, 40)]

    def test_a_fresh_job_has_no_file(self, tmp_path: Path) -> None:
        """Position(0, 0), the start, has no checkpoint file."""
        with pytest.raises(ValueError, match="afresh"):
            position_path(tmp_path, Position(0, 0))
