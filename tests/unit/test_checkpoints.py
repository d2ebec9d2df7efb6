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
    epoch_path,
    load_checkpoint,
    newest_readable_checkpoint,
    save_checkpoint,
)


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


class TestNewestReadableCheckpoint:
    def test_returns_the_newest_epoch_and_its_state(self, tmp_path: Path) -> None:
        """With every file whole, the newest epoch is returned with its state."""
        _save_epochs(tmp_path, range(3))
        found = newest_readable_checkpoint(tmp_path)
        assert found is not None
        epoch, state = found
        assert epoch == 2 and torch.equal(state["weight"], _state(2)["weight"])

    @pytest.mark.parametrize(
        "damage",
        [
            pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
            pytest.param(lambda data: data[:-1], id="last-byte-lost"),
            pytest.param(lambda data: b"", id="empty"),
            pytest.param(lambda data: b"\x8f not a checkpoint \x00" * 64, id="garbage"),
        ],
    )
    def test_damaged_newest_falls_back_to_the_previous(self, tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
        """A newest file that does not load is skipped with a warning naming it; the previous epoch is used."""
        _save_epochs(tmp_path, range(3))
        newest = epoch_path(tmp_path, 2)
        newest.write_bytes(damage(newest.read_bytes()))
        with capture_logs() as logs:
            found = newest_readable_checkpoint(tmp_path)
        assert found is not None and found[0] == 1
        assert torch.equal(found[1]["weight"], _state(1)["weight"])
        [warning] = [e for e in logs if e["event"] == "checkpoint_unreadable"]
        assert warning["log_level"] == "warning" and warning["path"] == str(newest) and warning["reason"]

    def test_file_holding_another_epoch_is_skipped(self, tmp_path: Path) -> None:
        """A file whose content is another epoch's (a misplaced copy) is not trusted under this name."""
        _save_epochs(tmp_path, range(3))
        epoch_path(tmp_path, 2).write_bytes(epoch_path(tmp_path, 1).read_bytes())
        with capture_logs() as logs:
            found = newest_readable_checkpoint(tmp_path)
        assert found is not None and found[0] == 1
        assert [e["reason"] for e in logs] == ["it holds epoch 1, not 2"]

    def test_none_when_no_file_loads(self, tmp_path: Path) -> None:
        """Every epoch file damaged: None, with one warning per file."""
        _save_epochs(tmp_path, range(2))
        for epoch in (0, 1):
            epoch_path(tmp_path, epoch).write_bytes(b"garbage")
        with capture_logs() as logs:
            assert newest_readable_checkpoint(tmp_path) is None
        assert [e["path"] for e in logs] == [str(epoch_path(tmp_path, e)) for e in (1, 0)]

    def test_empty_folder_has_none(self, tmp_path: Path) -> None:
        """An empty folder, or one that does not exist, gives None."""
        assert newest_readable_checkpoint(tmp_path) is None
        assert newest_readable_checkpoint(tmp_path / "nowhere") is None
