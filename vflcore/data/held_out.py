"""The active party's own choice of test rows: a file of sample IDs, one per line.

A paper's benchmark fixes its test rows; a bank holds out last quarter's customers. Either way
the active party's dataset names them (``[datasets.NAME] held_out_ids``), and once PSI has
aligned the rows, the aligned rows with those IDs are the job's test rows: ``HeldOutIds.rows``
finds them, and every passive party is told their positions (``HoldOut``), never the IDs.

The file is UTF-8 text, one ID per line, exactly as in the table's ID column (no trimming but
the line ending, so an ID may hold spaces); blank lines are skipped. IDs that no other party
holds are simply not among the aligned rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflcore.data import id_arrays
from vflcore.errors import DataError


@dataclass(frozen=True, eq=False)  # eq=False: comparing numpy arrays field by field is ambiguous
class HeldOutIds:
    """The test IDs of the active party's dataset, and the file they came from (for every message)."""

    ids: np.ndarray
    source: Path

    def rows(self, aligned_ids: np.ndarray) -> np.ndarray:
        """Positions among ``aligned_ids`` whose ID is held out, ascending; DataError if none or all are.

        No ID is named in an error: it reaches logs and the job's status.
        """
        rows = id_arrays.member_positions(aligned_ids, self.ids)
        if len(rows) == 0:
            raise DataError(
                f"{self.source}: none of its {len(self.ids)} held-out IDs is among the {len(aligned_ids)} aligned "
                "rows; check that the file holds IDs of this table's ID column"
            )
        if len(rows) == len(aligned_ids):
            raise DataError(
                f"{self.source}: all {len(aligned_ids)} aligned rows are held out, so none is left to train on; "
                "hold out fewer IDs"
            )
        return rows


def read_held_out_ids(path: Path) -> HeldOutIds:
    """The IDs in ``path``; DataError naming the file if it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: the held_out_ids file does not exist; fix the dataset's held_out_ids path") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: held_out_ids is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read held_out_ids ({exc.strerror or exc})") from None
    ids = [line for line in text.splitlines() if line]
    if not ids:
        raise DataError(f"{path}: held_out_ids holds no IDs; give one test ID per line, or remove the setting")
    return HeldOutIds(np.asarray(ids, dtype=np.dtypes.StringDType()), path)
