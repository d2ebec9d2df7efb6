"""Finding IDs in a sorted ID array, against Python's ``bisect`` on the same strings.

The inference endpoint finds each requested ID's aligned row this way. numpy's own
``searchsorted`` on ``StringDType`` misreads strings of 16 bytes or more before numpy 2.5
(numpy#31533), so ``sorted_positions`` must be right for IDs as banks have them: long shared
prefixes, UUIDs, non-ASCII text, up to 256 bytes.
"""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from vflcore.data.id_arrays import STRING_IDS, sorted_positions, string_column

ID_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=64).filter(
    lambda s: len(s.encode()) <= 256
)
PREFIXED = st.builds(lambda local, n: f"{local}-{n:012d}@bank.example.com", ID_TEXT, st.integers(0, 10**12))


def _oracle(ids: list[str], wanted: list[str]) -> list[int]:
    """Python's own answer: code-point order on ``str`` is UTF-8 byte order."""
    return [bisect.bisect_left(ids, w) for w in wanted]


class TestSortedPositions:
    """Each wanted ID's insertion point, as ``bisect_left`` gives it."""

    @settings(max_examples=60, deadline=None)
    @given(st.sets(st.one_of(ID_TEXT, PREFIXED), min_size=0, max_size=300), st.lists(st.one_of(ID_TEXT, PREFIXED)))
    def test_any_ids_are_found_where_bisect_finds_them(self, ids: set[str], others: list[str]) -> None:
        """Present IDs land on their own row, absent ones where they would be inserted."""
        ordered = sorted(ids)
        wanted = ordered[::3] + others
        found = sorted_positions(np.asarray(ordered, dtype=STRING_IDS), np.asarray(wanted, dtype=STRING_IDS))
        assert found.tolist() == _oracle(ordered, wanted)

    def test_long_e_mail_ids_from_arrow_find_themselves(self) -> None:
        """1,000 sorted 40-byte IDs, as the reader hands them over, each on its own row."""
        rng = np.random.default_rng(7)
        ordered = sorted({f"cust-{rng.integers(10**12):012d}@bank.example.com" for _ in range(1000)})
        table_ids = string_column(pa.array(ordered))
        assert sorted_positions(table_ids, table_ids).tolist() == list(range(len(ordered)))

    def test_nothing_to_find_and_nothing_to_search(self) -> None:
        """Empty inputs give empty or zero positions, not an error."""
        empty = np.zeros(0, dtype=STRING_IDS)
        assert sorted_positions(empty, np.asarray(["a"], dtype=STRING_IDS)).tolist() == [0]
        assert sorted_positions(np.asarray(["a"], dtype=STRING_IDS), empty).tolist() == []
