"""The columnar reader's own promises: no Python object per row, arrays filled in place, sized right."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from vflcore.data import columnar
from vflcore.data.columnar import keep_rows, read_columnar
from vflcore.data.tables import read_party_csv
from vfltesting.reference_tables import reference_read_party_csv

ROWS = 100_000


def _table(rows: int, features: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = pc.binary_join_element_wise("u", pa.array(rng.permutation(rows)).cast(pa.string()), "")
    columns = {"id": ids, **{f"f{j}": pa.array(rng.standard_normal(rows).astype(np.float32)) for j in range(features)}}
    return pa.table(columns)


class TestNoObjectPerRow:
    @pytest.mark.parametrize("kind", ["csv", "parquet"])
    def test_python_allocations_stay_near_the_arrays(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
    ) -> None:
        """Reading 100k rows allocates, at its peak, the arrays it returns plus a piece, not a str per row.

        tracemalloc sees Python objects and numpy's buffers, not Arrow's: an object per ID (57
        bytes each, 5.7 MB here) or per cell would cross the bound.
        """
        monkeypatch.setattr(columnar, "_PIECE_BYTES", 1 << 20)
        path = tmp_path / f"t.{kind}"
        table = _table(ROWS, 5)
        if kind == "csv":
            pcsv.write_csv(table, path)
        else:
            pq.write_table(table, path)
        tracemalloc.start()
        try:
            read = read_party_csv(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        arrays = read.features.nbytes + read.ids.nbytes
        assert read.num_rows == ROWS
        assert peak < arrays + 2 * (1 << 20) + (2 << 20), (peak, arrays)


class TestFilling:
    def test_keep_rows_moves_rows_forward_in_place(self) -> None:
        """Compacting a block at a time gives the fancy-indexed rows, in the same buffer."""
        values = np.arange(40, dtype=np.float32).reshape(20, 2)
        keep = np.array([0, 2, 3, 7, 8, 9, 15, 19])
        expected = values[keep].copy()
        kept = keep_rows(values, keep)
        assert np.array_equal(kept, expected)
        assert np.shares_memory(kept, values)

    def test_rows_shorter_than_the_first_piece_grow_the_arrays(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Later rows shorter than the first piece's outgrow the estimate: the arrays grow, the table is exact."""
        monkeypatch.setattr(columnar, "_PIECE_BYTES", 4096)
        long_rows = [f"{'long-id-' * 8}{n},{n}.123456789,{-n}.987654321\n" for n in range(100)]
        short_rows = [f"s{n},{n},{n}\n" for n in range(5000)]
        path = tmp_path / "p.csv"
        path.write_text("id,a,label\n" + "".join(long_rows + short_rows))
        read = read_columnar(path, id_column="id", label_column="label", feature_columns=None)
        assert read is not None
        old = reference_read_party_csv(path, label_column="label")
        assert read.ids.tolist() == old.ids.tolist()
        assert read.features.tobytes() == old.features.tobytes()
        assert read.labels is not None and old.labels is not None
        assert read.labels.tobytes() == old.labels.tobytes()
