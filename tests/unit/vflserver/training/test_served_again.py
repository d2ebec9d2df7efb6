"""What a crashed server needs to serve a federated model again: the terms written at serving, read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.dtypes import StringDType

from vflcore.data.tables import ids_digest
from vflcore.job.schedule import Position
from vflcore.psi.cache import save_alignment
from vflserver.training.served_again.saved_terms import SERVED_FILE, NotServableAgain, read_served, write_served
from vflserver.training.served_again.terms import RejoinTerms

OWN = np.array(["cust-00001@bank.example", "ВИНО-12-ünïcødé", "u3"], dtype=StringDType())
KEY = bytes(range(32))


def _saved(run_dir: Path) -> RejoinTerms:
    terms = RejoinTerms(KEY, Position.after_epoch(2))
    save_alignment(run_dir / "psi", KEY, OWN[:2], ids_digest(OWN))
    write_served(run_dir, terms, {2: b"\x01" * 32, 3: b"\x02" * 32})
    return terms


def test_the_terms_and_the_alignment_come_back_as_written(tmp_path: Path) -> None:
    terms = _saved(tmp_path)
    saved = read_served(tmp_path, OWN)
    assert saved.terms == terms
    assert saved.id_set_digests == {2: b"\x01" * 32, 3: b"\x02" * 32}
    assert saved.aligned_ids.tolist() == OWN[:2].tolist()


def test_a_model_served_before_the_file_existed_says_so(tmp_path: Path) -> None:
    with pytest.raises(NotServableAgain, match=f"{SERVED_FILE} is missing.*submit the job again"):
        read_served(tmp_path, OWN)


def test_changed_data_or_a_deleted_alignment_is_named(tmp_path: Path) -> None:
    _saved(tmp_path)
    with pytest.raises(
        NotServableAgain, match=r"saved alignment .*alignment-.*npz is missing, or the active party's data"
    ):
        read_served(tmp_path, OWN[:2])  # another ID set: another digest


def test_a_damaged_file_is_named(tmp_path: Path) -> None:
    (tmp_path / SERVED_FILE).write_text("{not json")
    with pytest.raises(NotServableAgain, match=f"{SERVED_FILE} is unreadable"):
        read_served(tmp_path, OWN)
