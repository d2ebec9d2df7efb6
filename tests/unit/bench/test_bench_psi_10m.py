"""``make bench-psi-10m``'s own arithmetic: the two ID sets and their overlap, the CSVs, and the floor.

The bench itself runs two daemons for tens of minutes; these check, in milliseconds, that what
it writes and what it compares against are what its report says.
"""

from __future__ import annotations

from pathlib import Path

from bench.psi.inputs import IdSets, write_numbered_csv
from bench.psi.psi_10m import floor_seconds
from bench.psi.speed import Speed


class TestIdSets:
    def test_overlap_and_width(self) -> None:
        """80 % of 10 IDs shared: the client's IDs start at 2; 10M x 10M needs 8 digits (up to 11,999,999)."""
        ids = IdSets.with_overlap(10, 8)
        assert ids.first_client == 2 and ids.shared == range(2, 10) and ids.width == 7
        assert ids.name(3) == "user-0000003"
        big = IdSets.with_overlap(10_000_000, 8_000_000)
        assert big.width == 8 and len(big.shared) == 8_000_000 and big.name(11_999_999) == "user-11999999"

    def test_numbered_csv_holds_the_set_shuffled(self, tmp_path: Path) -> None:
        """Each party's CSV: an ``id`` header, then exactly its IDs, in a shuffled order, written in blocks."""
        ids = IdSets.with_overlap(50, 40)
        path = tmp_path / "party2.csv"
        write_numbered_csv(path, ids, ids.first_client, seed=2, block=7)
        header, *rows = path.read_text(encoding="utf-8").splitlines()
        assert header == "id"
        assert sorted(rows) == [ids.name(n) for n in range(10, 60)]
        assert rows != sorted(rows)


def test_floor_is_both_parties_arithmetic_over_the_cores() -> None:
    """2 X25519 + 1 hash per ID, over both parties' IDs, divided by the cores."""
    speed = Speed(openssl_us=None, crypto_wall_us=30.0, crypto_cpu_us=25.0, hash_cpu_us=5.0)
    assert floor_seconds(2_000_000, speed, 2) == 2_000_000 * 55e-6 / 2
