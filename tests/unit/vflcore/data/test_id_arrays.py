"""Whole-column ID operations against the per-row code they replaced: digests, row selection, the aligned-IDs file.

Saved alignments are keyed by ``ids_digest`` and parties compare ``aligned_digest``: their bytes
must never change. They are pinned here twice: against the old per-row implementation
(``vfltesting.reference_tables``) on many ID arrays, and against constants.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import structlog

from vflcore.data.id_arrays import STRING_IDS, digest_and_order, find_repeats, fixed_width, padded_utf8, string_column
from vflcore.data.tables import (
    DataError,
    PartyTable,
    aligned_digest,
    first_occurrences,
    ids_digest,
    select_rows,
    take_rows,
    write_aligned_ids,
)
from vfltesting.reference_tables import (
    ReferenceTable,
    reference_aligned_digest,
    reference_ids_digest,
    reference_select_rows,
    reference_write_aligned_ids,
)

TRICKY = [
    "customer-000002",
    "Zo\u00eb",
    "東京",
    "7",
    "07",
    'comma, "quoted"',
    "🦊 fox",
    "Zoe\u0308",
]


def _random_ids(count: int, seed: int) -> list[str]:
    """IDs of 1 to 40 characters from ASCII, Latin-1, CJK and emoji: every UTF-8 width, sorting traps."""
    rng = np.random.default_rng(seed)
    alphabet = [*"abcXYZ019-_ ,\"'", "é", "ß", "Ω", "東", "京", "😀", "\U0010ffff", "\uffff"]
    ids = {"".join(rng.choice(alphabet, size=rng.integers(1, 41))).strip() or "x" for _ in range(count)}
    return sorted(ids)


ID_SETS = {
    "tricky": TRICKY,
    "one": ["only"],
    "random": _random_ids(3000, 0),
    "prefixes": ["a", "ab", "abc", "abcdefgh", "abcdefghi", "abcdefghijklmnop", "abcdefghijklmnopq"],
}


def _forms(ids: list[str]) -> dict[str, np.ndarray]:
    """The ID array as the callers hand it over: the table's StringDType, the PSI cache's object, numpy str."""
    return {
        "StringDType": np.array(ids, dtype=STRING_IDS),
        "object": np.array(ids, dtype=object),
        "str": np.array(ids, dtype=str),
    }


class TestDigests:
    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_ids_digest_is_the_old_bytes(self, name: str) -> None:
        """The set digest equals the per-row one, in every array form and any row order."""
        ids = ID_SETS[name]
        expected = reference_ids_digest(np.array(ids, dtype=object))
        shuffled = [ids[i] for i in np.random.default_rng(1).permutation(len(ids))]
        for form in (*_forms(ids).values(), *_forms(shuffled).values()):
            assert ids_digest(form) == expected

    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_digest_and_order_from_one_copy(self, name: str) -> None:
        """The active party's digest and sort order in one pass: the same digest, and the rows in
        Python's ``sorted`` order of the IDs."""
        ids = [ID_SETS[name][i] for i in np.random.default_rng(2).permutation(len(ID_SETS[name]))]
        digest, order = digest_and_order(np.array(ids, dtype=STRING_IDS))
        assert digest == reference_ids_digest(np.array(ids, dtype=object))
        assert [ids[i] for i in order.tolist()] == sorted(ids)
        assert digest_and_order(np.array(ids, dtype=STRING_IDS), order)[0] == digest

    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_aligned_digest_is_the_old_bytes(self, name: str) -> None:
        """The ordered digest equals the per-row one, in every array form."""
        ids = ID_SETS[name]
        expected = reference_aligned_digest(np.array(ids, dtype=object))
        for form in _forms(ids).values():
            got = aligned_digest(form)
            assert got.dtype == np.uint8 and got.shape == (32,)
            assert got.tobytes() == expected.tobytes()

    def test_pinned_constants(self) -> None:
        """The digests of one fixed list, written down: saved alignments stay valid across versions."""
        ids = np.array(TRICKY, dtype=STRING_IDS)
        assert ids_digest(ids).hex() == "507e6ced7e3e642a302457e4a1ee73695ea7fda23edcdd4ab47574658dcb61a0"
        assert aligned_digest(ids).tobytes().hex() == "123bce0317a4ee26979f6b159e98dd63d1c0b0a468bbbd5e76a1a1798944e78a"

    def test_empty(self) -> None:
        """No IDs digest as no bytes, as before."""
        empty = np.array([], dtype=STRING_IDS)
        assert ids_digest(empty) == reference_ids_digest(np.array([], dtype=object))
        assert aligned_digest(empty).tobytes() == reference_aligned_digest(np.array([], dtype=object)).tobytes()

    def test_slices_do_not_change_the_digest(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Hashed a few rows at a time (the 1M-row slices of a big table), the bytes are the same."""
        from vflcore.data import id_arrays

        ids = np.array(ID_SETS["random"], dtype=STRING_IDS)
        whole = (ids_digest(ids), aligned_digest(ids).tobytes())
        monkeypatch.setattr(id_arrays, "_SLICE_ROWS", 7)
        assert (ids_digest(ids), aligned_digest(ids).tobytes()) == whole


def _tables(ids: list[str]) -> tuple[PartyTable, ReferenceTable]:
    rng = np.random.default_rng(2)
    features = rng.standard_normal((len(ids), 3)).astype(np.float32)
    labels = rng.standard_normal(len(ids))
    new = PartyTable(np.array(ids, dtype=STRING_IDS), features, ("a", "b", "c"), labels, source=Path("t.csv"))
    old = ReferenceTable(np.array(ids, dtype=object), features, ("a", "b", "c"), labels, source=Path("t.csv"))
    return new, old


class TestSelectRows:
    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_same_rows_as_the_per_row_lookup(self, name: str) -> None:
        """Any subset in any order, handed over in any array form, selects the old rows."""
        ids = ID_SETS[name]
        new, old = _tables(ids)
        rng = np.random.default_rng(3)
        wanted = [ids[i] for i in rng.permutation(len(ids))[: max(1, len(ids) * 2 // 3)]]
        expected = reference_select_rows(old, np.array(wanted, dtype=object))
        for form in _forms(wanted).values():
            got = select_rows(new, form)
            assert got.ids.tolist() == expected.ids.tolist()
            assert got.features.tobytes() == expected.features.tobytes()
            assert got.labels is not None and expected.labels is not None
            assert got.labels.tobytes() == expected.labels.tobytes()

    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_the_tables_own_order_returns_the_table_itself(self, name: str) -> None:
        """Every ID in the table's own order, in any array form: the table, not a copy of its features."""
        ids = ID_SETS[name]
        new, _ = _tables(ids)
        for form in _forms(ids).values():
            assert select_rows(new, form) is new

    def test_all_ids_in_another_order_are_selected_not_returned(self) -> None:
        new, old = _tables(TRICKY)
        wanted = np.array(TRICKY[::-1], dtype=object)
        got = select_rows(new, wanted)
        assert got is not new
        assert got.ids.tolist() == reference_select_rows(old, wanted).ids.tolist()

    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_take_rows_equals_selecting_the_rows_ids(self, name: str) -> None:
        """PSI hands over rows; taking them gives what looking their IDs up gives."""
        ids = ID_SETS[name]
        new, _ = _tables(ids)
        rows = np.random.default_rng(4).permutation(len(ids))[: max(1, len(ids) // 2)]
        taken, selected = take_rows(new, rows), select_rows(new, new.ids[rows])
        assert taken.ids.tolist() == selected.ids.tolist()
        assert taken.features.tobytes() == selected.features.tobytes()
        assert take_rows(new, np.arange(len(ids))) is new

    def test_missing_ids_have_the_old_message(self) -> None:
        """IDs the table lacks are counted, in the old words, and never named."""
        new, old = _tables(TRICKY)
        wanted = np.array(["7", "nobody", "東京", "nobody either"], dtype=object)
        with pytest.raises(DataError) as old_error:
            reference_select_rows(old, wanted)
        with pytest.raises(DataError) as new_error:
            select_rows(new, wanted)
        assert str(new_error.value) == str(old_error.value)
        assert "nobody" not in str(new_error.value)


class TestAlignedIdsFile:
    @pytest.mark.parametrize("name", sorted(ID_SETS))
    def test_same_bytes_as_csv_writer(self, tmp_path: Path, name: str) -> None:
        """aligned_ids.csv is byte for byte what csv.writer wrote: quoting, \\r\\n, non-ASCII."""
        ids = ID_SETS[name]
        old = reference_write_aligned_ids(tmp_path / "old", np.array(ids, dtype=object))
        for form_name, form in _forms(ids).items():
            new = write_aligned_ids(tmp_path / form_name, form)
            assert new.read_bytes() == old.read_bytes()

    def test_empty_id_is_quoted_like_csv_writer(self, tmp_path: Path) -> None:
        """A lone empty field is written "" by csv.writer; so it is here (a table never holds one)."""
        ids = np.array(["a", ""], dtype=object)
        old = reference_write_aligned_ids(tmp_path / "old", ids)
        assert write_aligned_ids(tmp_path / "new", ids).read_bytes() == old.read_bytes()


class TestRepeats:
    def test_first_rows_kept_and_counted(self) -> None:
        """Each ID's first row is kept; the dropped rows and the number of repeated IDs are reported."""
        repeats = find_repeats(pa.array(list("aabbbccdde")))
        assert repeats is not None
        assert repeats.keep.tolist() == [0, 2, 5, 7, 9]
        assert repeats.dropped.tolist() == [1, 3, 4, 6, 8]
        assert repeats.repeated_ids == 4

    def test_first_occurrences_warns_as_before(self) -> None:
        """The public helper keeps the old signature (a line per row) and logs the old warning."""
        from vfltesting.reference_tables import reference_first_occurrences

        ids = np.array(list("abacbb"), dtype=object)
        lines = [2, 3, 5, 6, 9, 10]
        with structlog.testing.capture_logs() as old_logs:
            old = reference_first_occurrences(Path("p.csv"), "id", ids, lines)
        with structlog.testing.capture_logs() as new_logs:
            new = first_occurrences(Path("p.csv"), "id", ids.astype(STRING_IDS), lines)
        assert old is not None and new is not None and new.tolist() == old.tolist()
        assert new_logs == old_logs

    def test_distinct_ids_and_a_hash_collision(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Distinct IDs give None, even when every hash collides: Arrow's exact hash table decides then."""
        from vflcore.data import id_arrays

        values = pa.array(ID_SETS["random"])
        assert find_repeats(values) is None
        monkeypatch.setattr(id_arrays, "hashes", lambda padded: np.zeros(len(padded), dtype=np.uint64))
        assert find_repeats(values) is None
        assert find_repeats(pa.array(["x", "y", "x"])) is not None


class TestConversions:
    def test_string_column_round_trips_every_width(self) -> None:
        """Arrow strings become StringDType unchanged: chunked, sliced, either offset width."""
        ids = ID_SETS["random"]
        for kind in (pa.string(), pa.large_string()):
            chunked = pa.chunked_array([pa.array(ids[:100], kind), pa.array(ids[100:], kind)])
            assert string_column(chunked).tolist() == ids
            assert string_column(chunked.chunk(1).slice(5)).tolist() == ids[105:]
        assert padded_utf8(chunked).dtype.itemsize % 8 == 0

    def test_fixed_width_for_code_that_asks_for_str(self) -> None:
        """StringDType cannot be cast to dtype=str without a width; fixed_width gives one."""
        ids = np.array(TRICKY, dtype=STRING_IDS)
        with pytest.raises(TypeError):
            np.asarray(ids, dtype=str)
        assert np.asarray(fixed_width(ids), dtype=str).tolist() == TRICKY

    def test_sort_order_is_python_string_order(self) -> None:
        """StringDType sorts by code point, as Python sorts str: align_rows and PSI's order agree."""
        ids = ID_SETS["random"][::-1]
        assert np.sort(np.array(ids, dtype=STRING_IDS)).tolist() == sorted(ids)


class TestWhitespace:
    def test_arrow_and_python_agree_on_whitespace(self) -> None:
        """The columnar reader finds blank IDs with Arrow's utf8_is_space; the old check was str.strip.

        Pinned for every code point up to U+3100 (beyond it Python knows no whitespace): an ID
        Arrow let through that Python calls blank would pass where the old reader refused it.
        """
        points = [c for c in range(1, 0x3100) if not 0xD800 <= c < 0xE000]
        arrow = pc.utf8_is_space(pa.array([chr(c) for c in points])).to_pylist()
        assert [c for c, space in zip(points, arrow, strict=True) if space] == [c for c in points if chr(c).isspace()]
