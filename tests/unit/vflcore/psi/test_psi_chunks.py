"""The pieces of chunked, resumable PSI: the secret upload order, the chunking, the sorted table, the
aligned order, the progress files and the pipeline helpers.

Everything runs in this process on small inputs; the exchange itself is in
``tests/integration/psi/test_psi_alignment.py`` (chunked equals one chunk) and
``tests/integration/psi/test_psi_resume.py`` (a real restart).
"""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from numpy.dtypes import StringDType

from vflcore.data.id_arrays import sort_order
from vflcore.psi.blinding import BlindingKey, blind, hash_and_blind
from vflcore.psi.chunks import Chunking, id_bytes, packed_points, point_list
from vflcore.psi.hash_to_curve import make_dst
from vflcore.psi.intersection import align_matches, is_strictly_increasing
from vflcore.psi.matching import MATCH_BYTES, SortedPoints, match
from vflcore.psi.order import UploadOrder
from vflcore.psi.pipeline import ahead, each_ahead, side_by_side
from vflcore.psi.progress import (
    ChunkLog,
    PsiSecrets,
    discard,
    discard_all,
    load_exchange,
    load_secrets,
    progress_dir,
    resumable_keys,
    save_exchange,
    save_secrets,
)

KEY = bytes(range(16))


class TestUploadOrder:
    @pytest.mark.parametrize("count", [0, 1, 2, 3, 10, 99, 100, 101, 1797, 70_001])
    def test_a_permutation_of_every_row(self, count: int) -> None:
        """Every row appears at exactly one position, whatever the count (a square or not)."""
        rows = UploadOrder(count, KEY).span(0, count)
        assert rows.dtype == np.int64
        assert np.array_equal(np.sort(rows), np.arange(count))

    def test_chunks_agree_with_the_whole(self) -> None:
        """Positions computed chunk by chunk, or in any order, give the rows of the whole span."""
        order = UploadOrder(1000, KEY)
        whole = order.span(0, 1000)
        pieces = np.concatenate([order.span(s, min(s + 7, 1000)) for s in range(0, 1000, 7)])
        assert np.array_equal(pieces, whole)
        picked = np.array([999, 0, 500, 3], dtype=np.int64)
        assert np.array_equal(order.rows(picked), whole[picked])

    def test_the_key_decides_the_order(self) -> None:
        """Same key, same order; another key, another order; neither is the identity."""
        a, b = UploadOrder(500, KEY).span(0, 500), UploadOrder(500, KEY).span(0, 500)
        other = UploadOrder(500, bytes(16)).span(0, 500)
        assert np.array_equal(a, b)
        assert not np.array_equal(a, other)
        assert not np.array_equal(a, np.arange(500))

    def test_bad_arguments_and_redacted_repr(self) -> None:
        """Out-of-range positions and wrong key sizes are refused; repr does not show the key."""
        order = UploadOrder(10, KEY)
        with pytest.raises(ValueError, match=r"\[0, 10\)"):
            order.rows(np.array([10]))
        with pytest.raises(ValueError, match="16 bytes"):
            UploadOrder(10, b"short")
        assert KEY.hex() not in repr(order) and "redacted" in repr(order)
        assert len({UploadOrder.new_key() for _ in range(10)}) == 10


class TestChunking:
    def test_bounds_cover_the_items_once(self) -> None:
        """Chunks of 7 over 30 items: 5 chunks, the last one short, together every item once."""
        cut = Chunking(30, 7)
        assert cut.count == 5
        assert [cut.bounds(c) for c in range(cut.count)] == [(0, 7), (7, 14), (14, 21), (21, 28), (28, 30)]
        assert cut.length(4) == 2 and cut.done_items(2) == 14 and cut.done_items(9) == 30
        assert Chunking(0, 5).count == 0 and Chunking(5, 5).count == 1
        with pytest.raises(IndexError):
            cut.bounds(5)
        with pytest.raises(ValueError, match="at least 1"):
            Chunking(10, 0)

    def test_ids_of_any_string_array(self) -> None:
        """Object, str_ and StringDType ID arrays give the same UTF-8 bytes."""
        values = ["a", "é", "日本", "x" * 40]
        rows = np.array([3, 0, 2])
        for ids in (np.array(values, dtype=object), np.array(values), np.array(values, dtype=StringDType())):
            assert id_bytes(ids, rows) == [v.encode("utf-8") for v in ("x" * 40, "a", "日本")]

    def test_points_keep_trailing_zero_bytes(self) -> None:
        """A point ending in zero bytes stays 32 bytes long on its way to the blinder, and back."""
        points = np.zeros((3, 32), np.uint8)
        points[1, 0] = 9
        items = point_list(points)
        assert [len(p) for p in items] == [32, 32, 32] and items[1][0] == 9
        assert np.array_equal(packed_points(b"".join(items)), points)
        with pytest.raises(ValueError, match=r"\(n, 32\) uint8"):
            point_list(np.zeros((3, 12), np.uint8))


def _distinct(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.integers(0, 256, (n, MATCH_BYTES), dtype=np.uint8)
    assert len({r.tobytes() for r in rows}) == n
    return rows


class TestSortedPoints:
    def test_built_from_chunks_equals_built_whole(self) -> None:
        """A table filled chunk by chunk finds the same pairs as one built from the whole array."""
        rng = np.random.default_rng(1)
        table_values, queries = _distinct(rng, 300), _distinct(rng, 50)
        queries[::3] = table_values[rng.choice(300, len(queries[::3]), replace=False)]
        whole = SortedPoints(table_values)
        chunked = SortedPoints.build(300, (table_values[s : s + 13] for s in range(0, 300, 13)))
        for got in (whole.lookup(queries), chunked.lookup(queries)):
            assert [(int(i), int(j)) for i, j in zip(*got, strict=True)] == [
                (i, next(j for j in range(300) if table_values[j].tobytes() == q.tobytes()))
                for i, q in enumerate(queries)
                if any(table_values[j].tobytes() == q.tobytes() for j in range(300))
            ]

    def test_ties_on_the_sort_key_are_matched_exactly(self) -> None:
        """Values equal in their first 8 bytes, on both sides: each finds exactly its equal."""
        rng = np.random.default_rng(2)
        base = _distinct(rng, 6)
        base[:, :8] = base[0, :8]  # all six share the sort key
        table = SortedPoints(base[:4])
        i, j = table.lookup(base[[5, 2, 4, 0]])
        assert i.tolist() == [1, 3] and j.tolist() == [2, 0]

    def test_wrong_counts_are_refused(self) -> None:
        """A table announced for n values refuses more or fewer."""
        values = _distinct(np.random.default_rng(3), 10)
        with pytest.raises(ValueError, match="10 values, 11"):
            SortedPoints.build(11, [values])
        with pytest.raises(ValueError, match="more than the 9"):
            SortedPoints.build(9, [values])

    def test_ecdh_psi_end_to_end_through_the_table(self) -> None:
        """Two parties' doubly blinded IDs meet through the table exactly on the shared IDs."""
        dst = make_dst("chunks-test")
        a, b = BlindingKey.generate(), BlindingKey.generate()
        mine = [f"id-{n}".encode() for n in range(0, 40)]
        theirs = [f"id-{n}".encode() for n in range(25, 60)]

        ab = np.frombuffer(b"".join(blind(hash_and_blind(mine, dst, a), b)), np.uint8).reshape(-1, 32)
        ba = np.frombuffer(b"".join(blind(hash_and_blind(theirs, dst, b), a)), np.uint8).reshape(-1, 32)
        i, j = match(ab[:, :MATCH_BYTES].copy(), ba[:, :MATCH_BYTES].copy())
        assert [mine[k] for k in i] == [theirs[k] for k in j] == [f"id-{n}".encode() for n in range(25, 40)]


class TestAlignedOrder:
    def test_common_rows_sorted_by_id_bytes_with_each_party_s_positions(self) -> None:
        """Rows both parties matched, in UTF-8 byte order of their IDs; positions follow that order."""
        ids = np.array(["b", "é", "a", "c", "Z"], dtype=object)
        matches = {
            2: (np.array([1, 0, 4, 2]), np.array([10, 11, 14, 12])),
            3: (np.array([2, 1, 3, 4]), np.array([20, 21, 23, 24])),
        }
        aligned = align_matches(ids, matches)
        assert ids[aligned.rows].tolist() == ["Z", "a", "é"]  # b (row 0) is missing from party 3
        assert aligned.members[2].tolist() == [14, 12, 10] and aligned.members[3].tolist() == [24, 20, 21]
        assert aligned.pairwise == {2: 4, 3: 4}
        assert all(m.dtype == np.int64 for m in aligned.members.values())

    def test_a_given_sort_order_gives_the_same_alignment(self) -> None:
        """The server hands over its IDs' sort order (computed once for the digest): nothing changes."""
        rng = np.random.default_rng(5)
        ids = np.array([f"u{n}" for n in rng.permutation(500)] + ["Zoë", "東京", "é", "7", "07"], dtype=object)
        rows = {party: rng.permutation(len(ids))[: 300 + 20 * party] for party in (2, 3)}
        matches = {party: (r, rng.permutation(10_000)[: len(r)]) for party, r in rows.items()}
        plain = align_matches(ids, matches)
        given = align_matches(ids, matches, sort_order(ids))
        assert given.rows.tolist() == plain.rows.tolist() and given.rows.dtype == np.int64
        assert all(given.members[p].tolist() == plain.members[p].tolist() for p in (2, 3))
        assert given.pairwise == plain.pairwise

    def test_nothing_in_common(self) -> None:
        """No common row: empty rows and members, the pairwise counts still reported."""
        ids = np.array(["a", "b"], dtype=object)
        aligned = align_matches(ids, {2: (np.array([0]), np.array([5])), 3: (np.array([1]), np.array([6]))})
        assert aligned.rows.tolist() == [] and aligned.members[2].tolist() == [] and aligned.pairwise == {2: 1, 3: 1}

    def test_strictly_increasing(self) -> None:
        """The passive party's check: distinct IDs in byte order."""
        assert is_strictly_increasing(np.array(["Z", "a", "é"], dtype=object))
        assert not is_strictly_increasing(np.array(["a", "a"], dtype=object))
        assert not is_strictly_increasing(np.array(["é", "a"], dtype=object))
        assert is_strictly_increasing(np.array([], dtype=object))


class TestProgressFiles:
    def test_secrets_round_trip_owner_only(self, tmp_path: Path) -> None:
        """Saved secrets read back to the same blinding and order; file 0600, folder 0700, whatever the umask."""
        folder = progress_dir(tmp_path / "psi", b"\x01" * 32)
        secrets = PsiSecrets.generate()
        path = save_secrets(folder, secrets)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
        back = load_secrets(folder)
        assert back is not None and back.order_key == secrets.order_key
        assert back.blinding._raw() == secrets.blinding._raw()
        assert "redacted" in repr(back) and secrets.order_key.hex() not in repr(back)
        assert not list(folder.glob(".secret-*"))

    def test_resumable_keys_and_discard(self, tmp_path: Path) -> None:
        """Keys are listed only where a readable secret is kept; discard removes them."""
        psi = tmp_path / "job" / "party-2" / "psi"
        kept, broken = b"\x02" * 32, b"\x03" * 32
        save_secrets(progress_dir(psi, kept), PsiSecrets.generate())
        progress_dir(psi, broken).mkdir(parents=True)
        (progress_dir(psi, broken) / "secret").write_bytes(b"not a secret")
        assert resumable_keys([psi, tmp_path / "missing"]) == [kept]
        assert load_secrets(progress_dir(psi, broken)) is None
        discard(progress_dir(psi, kept))
        assert resumable_keys([psi]) == []
        discard_all(psi)
        assert not list(psi.glob("progress-*"))

    def test_exchange_shape_round_trip(self, tmp_path: Path) -> None:
        """The shape a resume must match reads back as written; a missing or bad file is None."""
        save_exchange(tmp_path, 8, {1: 100, 3: 7, 2: 50})
        assert load_exchange(tmp_path) == (8, {1: 100, 2: 50, 3: 7})
        (tmp_path / "exchange.json").write_text("{")
        assert load_exchange(tmp_path) is None
        assert load_exchange(tmp_path / "nowhere") is None

    def test_chunk_log_keeps_whole_chunks_only(self, tmp_path: Path) -> None:
        """A chunk half written when a party died is cut off; the whole ones read back in order."""
        cut = Chunking(10, 4)
        values = np.arange(10 * MATCH_BYTES, dtype=np.uint8).reshape(10, MATCH_BYTES)
        path = tmp_path / "from-2.bin"
        with ChunkLog(path, cut, MATCH_BYTES) as chunk_log:
            assert chunk_log.open() == 0
            chunk_log.append(0, values[0:4])
            chunk_log.append(1, values[4:8])
            with pytest.raises(ValueError, match="chunk 3 arrived, chunk 2 was next"):
                chunk_log.append(3, values[8:10])
        with path.open("ab") as fh:
            fh.write(values[8:9].tobytes())  # half of chunk 2
        with ChunkLog(path, cut, MATCH_BYTES) as chunk_log:
            assert chunk_log.open() == 2
            assert path.stat().st_size == 8 * MATCH_BYTES
            chunk_log.append(2, values[8:10])
            assert np.array_equal(np.concatenate(list(chunk_log.chunks())), values)
        with ChunkLog(path, cut, MATCH_BYTES) as chunk_log:
            assert chunk_log.open() == 3
            assert chunk_log.open(fresh=True) == 0 and path.stat().st_size == 0


class TestPipeline:
    def test_results_in_order_at_most_depth_at_once(self) -> None:
        """Tasks that end in reverse order still come back in order, never more than ``depth`` running."""
        running, most = 0, 0
        lock = threading.Lock()

        def task(n: int) -> int:
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
            time.sleep(0.002 * (5 - n % 5))
            with lock:
                running -= 1
            return n

        assert [r for _, r in each_ahead(task, range(12), 3)] == list(range(12))
        assert most <= 3
        assert list(ahead([], 2)) == []

    def test_a_failing_task_is_raised_in_order(self) -> None:
        """The failure of a task comes out where its result would have."""

        def task(n: int) -> int:
            if n == 2:
                raise KeyError(n)
            return n

        got = []
        with pytest.raises(KeyError):
            for _, result in each_ahead(task, range(5), 2):
                got.append(result)
        assert got == [0, 1]

    def test_side_by_side_raises_the_first_failure_and_stops_the_rest(self) -> None:
        """One stream fails: the stop event is set, the waiting stream ends, the failure is raised."""
        stop = threading.Event()
        ended = threading.Event()

        def waits() -> None:
            stop.wait(10)
            ended.set()

        def fails() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            side_by_side({"waits": waits, "fails": fails}, stop, grace_s=5)
        assert stop.is_set() and ended.is_set()
        side_by_side({"a": lambda: None, "b": lambda: None}, threading.Event())
