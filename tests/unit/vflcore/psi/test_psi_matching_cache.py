"""PSI bookkeeping around the cryptography: matching double-blinded values, and saved alignments.

``match`` is checked against a brute-force dictionary join on random data; ``vflcore.psi.cache``
against what a restarted party relies on: a key that changes with any input, a faithful
round-trip, and refusal of a file written for other data.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from vflcore.data.tables import ids_digest
from vflcore.psi.cache import (
    PROTOCOL_VERSION,
    alignment_key,
    cache_path,
    cached_keys,
    load_alignment,
    load_pairwise,
    save_alignment,
)
from vflcore.psi.matching import MATCH_BYTES, match, truncate


def brute_force(left: np.ndarray, right: np.ndarray) -> list[tuple[int, int]]:
    """Every (i, j) with equal rows, by a dictionary of the right side's rows."""
    where = {row.tobytes(): j for j, row in enumerate(right)}
    return sorted((i, where[row.tobytes()]) for i, row in enumerate(left) if row.tobytes() in where)


def as_pairs(found: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    i, j = found
    assert i.dtype == np.int64 and j.dtype == np.int64
    return sorted(zip(i.tolist(), j.tolist(), strict=True))


def distinct_rows(rng: np.random.Generator, n: int, width: int = MATCH_BYTES) -> np.ndarray:
    rows = rng.integers(0, 256, (n, width), dtype=np.uint8)
    assert len({r.tobytes() for r in rows}) == n
    return rows


def two_sides(seed: int, n_left: int, n_right: int, shared: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of distinct random values with exactly ``shared`` in common, each shuffled."""
    rng = np.random.default_rng(seed)
    pool = distinct_rows(rng, n_left + n_right - shared)
    left = pool[:n_left]
    right = np.concatenate([pool[:shared], pool[n_left:]])
    return left[rng.permutation(n_left)], right[rng.permutation(n_right)]


class TestMatch:
    @pytest.mark.parametrize(
        ("seed", "n_left", "n_right", "shared"),
        [(0, 500, 400, 150), (1, 1000, 1000, 0), (2, 700, 700, 700), (3, 300, 900, 300), (4, 1, 50, 1)],
        ids=["partial", "no-overlap", "full-overlap", "left-inside-right", "single"],
    )
    def test_agrees_with_brute_force(self, seed: int, n_left: int, n_right: int, shared: int) -> None:
        """Random distinct values: exactly the brute-force pairs, whatever the overlap."""
        left, right = two_sides(seed, n_left, n_right, shared)
        expected = brute_force(left, right)
        assert len(expected) == shared
        assert as_pairs(match(left, right)) == expected
        assert as_pairs(match(right, left)) == sorted((j, i) for i, j in expected)

    def test_empty_sides(self) -> None:
        """An empty side matches nothing and still returns int64 index arrays."""
        rows = distinct_rows(np.random.default_rng(5), 10)
        empty = np.zeros((0, MATCH_BYTES), np.uint8)
        assert as_pairs(match(empty, rows)) == []
        assert as_pairs(match(rows, empty)) == []
        assert as_pairs(match(empty, empty)) == []

    def test_a_difference_in_any_byte_is_no_match(self) -> None:
        """Values that differ in a single byte, at any of the 12 positions, do not match."""
        base = distinct_rows(np.random.default_rng(6), 1)[0]
        for position in range(MATCH_BYTES):
            other = base.copy()
            other[position] ^= 1
            assert as_pairs(match(base[None, :], other[None, :])) == [], position

    def test_values_sharing_a_long_prefix_on_one_side(self) -> None:
        """Two values of one side equal in their first 11 bytes: the one that really matches is found."""
        rng = np.random.default_rng(7)
        prefix = rng.integers(0, 256, MATCH_BYTES - 1, dtype=np.uint8)
        a, b = np.append(prefix, 1).astype(np.uint8), np.append(prefix, 2).astype(np.uint8)
        noise = distinct_rows(rng, 20)
        for left in (np.stack([a, b, *noise]), np.stack([b, a, *noise])):
            right = np.stack([*noise[::-1], b])
            assert as_pairs(match(left, right)) == brute_force(left, right)
            assert len(brute_force(left, right)) == 21

    def test_matches_truncated_full_values(self) -> None:
        """Matching works on ``truncate`` of (n, 32) blinded values, as the protocol sends them."""
        rng = np.random.default_rng(8)
        pool = distinct_rows(rng, 290, width=32)
        left32, right32 = pool[:200], np.concatenate([pool[140:200], pool[200:]])
        left, right = truncate(left32), truncate(right32)
        assert left.shape == (200, MATCH_BYTES) and left.flags.c_contiguous
        assert as_pairs(match(left, right)) == [(140 + k, k) for k in range(60)]

    def test_rejects_wrong_width(self) -> None:
        """Values that are not MATCH_BYTES wide are refused with their shapes in the message."""
        with pytest.raises(ValueError, match=r"\(n, 12\) bytes, got \(3, 32\)"):
            match(np.zeros((3, 32), np.uint8), np.zeros((3, MATCH_BYTES), np.uint8))


DIGESTS = {1: b"\x01" * 32, 2: b"\x02" * 32, 3: b"\x03" * 32}


class TestAlignmentKey:
    def test_deterministic_and_32_bytes(self) -> None:
        """The same job and digests give the same 32-byte key, whatever the mapping's order."""
        key = alignment_key("job", DIGESTS)
        assert len(key) == 32
        assert alignment_key("job", dict(reversed(DIGESTS.items()))) == key

    def test_changes_with_the_job_id(self) -> None:
        """A different job id gives a different key."""
        assert alignment_key("job", DIGESTS) != alignment_key("job2", DIGESTS)
        assert alignment_key("job", DIGESTS) != alignment_key("Job", DIGESTS)

    @pytest.mark.parametrize("party", [1, 2, 3])
    def test_changes_with_any_party_digest(self, party: int) -> None:
        """Changing one bit of any one party's digest changes the key."""
        changed = dict(DIGESTS)
        changed[party] = bytes([changed[party][0] ^ 1]) + changed[party][1:]
        assert alignment_key("job", changed) != alignment_key("job", DIGESTS)

    def test_changes_with_the_parties(self) -> None:
        """The same digests under other party numbers, or one party fewer, give other keys."""
        swapped = {1: DIGESTS[1], 2: DIGESTS[3], 3: DIGESTS[2]}
        renumbered = {1: DIGESTS[1], 2: DIGESTS[2], 4: DIGESTS[3]}
        fewer = {1: DIGESTS[1], 2: DIGESTS[2]}
        keys = {alignment_key("job", d) for d in (DIGESTS, swapped, renumbered, fewer)}
        assert len(keys) == 4

    def test_covers_the_protocol_version(self) -> None:
        """The key is a SHA-256 that starts from the protocol version (a new protocol never reuses)."""
        h = hashlib.sha256(PROTOCOL_VERSION.encode() + b"\0job\0")
        for party in sorted(DIGESTS):
            h.update(party.to_bytes(4, "big") + DIGESTS[party])
        assert alignment_key("job", DIGESTS) == h.digest()


class TestSavedAlignment:
    IDS = np.asarray(["customer-000002", "Zoë", "東京", "7", "07", 'comma, "quoted"'], dtype=object)

    def test_round_trip(self, tmp_path: Path) -> None:
        """Saved aligned IDs load back identical, in order, as Python strings."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        path = save_alignment(tmp_path / "psi", key, self.IDS, digest)
        assert path == cache_path(tmp_path / "psi", key) and path.is_file()
        loaded = load_alignment(tmp_path / "psi", key, digest)
        assert loaded is not None
        assert loaded.tolist() == self.IDS.tolist()
        assert all(type(v) is str for v in loaded.tolist())
        assert [p.name for p in (tmp_path / "psi").iterdir()] == [path.name]  # no temporary left behind

    def test_stored_as_utf8_and_older_files_still_load(self, tmp_path: Path) -> None:
        """IDs are kept as UTF-8 bytes back to back; files older versions wrote (unicode ``ids``, or
        fixed-width ``ids_utf8``) load the same."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        path = save_alignment(tmp_path, key, self.IDS, digest)
        encoded = [v.encode("utf-8") for v in self.IDS.tolist()]
        with np.load(path, allow_pickle=False) as saved:
            assert saved["ids_utf8_data"].tobytes() == b"".join(encoded)
            assert saved["ids_utf8_ends"].tolist() == np.cumsum([len(v) for v in encoded]).tolist()
        np.savez(
            path,
            ids_utf8=np.asarray(encoded, dtype="S"),
            key=np.frombuffer(key, np.uint8),
            id_digest=np.frombuffer(digest, np.uint8),
        )
        loaded = load_alignment(tmp_path, key, digest)
        assert loaded is not None and loaded.tolist() == self.IDS.tolist()
        np.savez(
            path,
            ids=np.asarray(self.IDS, dtype=str),
            key=np.frombuffer(key, np.uint8),
            id_digest=np.frombuffer(digest, np.uint8),
        )
        loaded = load_alignment(tmp_path, key, digest)
        assert loaded is not None and loaded.tolist() == self.IDS.tolist()

    def test_offsets_that_do_not_fit_the_bytes_are_not_loaded(self, tmp_path: Path) -> None:
        """A damaged file is no alignment (PSI runs again), not an exception or a wrong ID list."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        path = save_alignment(tmp_path, key, self.IDS, digest)
        with np.load(path, allow_pickle=False) as saved:
            kept = {name: saved[name] for name in saved.files}
        for ends, data in [
            (kept["ids_utf8_ends"] + 1, kept["ids_utf8_data"]),
            (kept["ids_utf8_ends"][::-1].copy(), kept["ids_utf8_data"]),
            (kept["ids_utf8_ends"], np.full(len(kept["ids_utf8_data"]), 0xFF, dtype=np.uint8)),
        ]:
            np.savez(path, **{**kept, "ids_utf8_ends": ends, "ids_utf8_data": data})
            assert load_alignment(tmp_path, key, digest) is None

    def test_empty_alignment_round_trips(self, tmp_path: Path) -> None:
        """An empty aligned list is saved and loaded as empty, not as missing."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        save_alignment(tmp_path, key, np.asarray([], dtype=object), digest)
        loaded = load_alignment(tmp_path, key, digest)
        assert loaded is not None and loaded.tolist() == []

    def test_file_for_other_data_is_ignored(self, tmp_path: Path) -> None:
        """A saved alignment whose ID digest is not this party's current one is not used."""
        key = alignment_key("job", DIGESTS)
        save_alignment(tmp_path, key, self.IDS, ids_digest(self.IDS))
        assert load_alignment(tmp_path, key, ids_digest(self.IDS[:-1])) is None

    def test_missing_other_key_or_corrupt_file_is_none(self, tmp_path: Path) -> None:
        """No file, another key's file, or an unreadable file all load as None."""
        key, other = alignment_key("job", DIGESTS), alignment_key("job2", DIGESTS)
        digest = ids_digest(self.IDS)
        assert load_alignment(tmp_path / "nowhere", key, digest) is None
        save_alignment(tmp_path, other, self.IDS, digest)
        assert load_alignment(tmp_path, key, digest) is None
        cache_path(tmp_path, key).write_bytes(b"not an npz file")
        assert load_alignment(tmp_path, key, digest) is None

    def test_file_renamed_to_another_key_is_ignored(self, tmp_path: Path) -> None:
        """A file holds its own key: copied under another key's name, it does not count for that key."""
        key, other = alignment_key("job", DIGESTS), alignment_key("job2", DIGESTS)
        digest = ids_digest(self.IDS)
        save_alignment(tmp_path, other, self.IDS, digest).rename(cache_path(tmp_path, key))
        assert load_alignment(tmp_path, key, digest) is None

    def test_overwrite_replaces(self, tmp_path: Path) -> None:
        """Saving again under the same key replaces the earlier result."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        save_alignment(tmp_path, key, self.IDS, digest)
        save_alignment(tmp_path, key, self.IDS[:2], digest)
        loaded = load_alignment(tmp_path, key, digest)
        assert loaded is not None and loaded.tolist() == self.IDS[:2].tolist()


class TestSavedOverlaps:
    IDS = np.asarray(["a", "b", "c"], dtype=object)

    def test_pairwise_overlaps_round_trip(self, tmp_path: Path) -> None:
        """The active party's pairwise overlaps load back with the alignment, so a reuse still reports them."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        save_alignment(tmp_path, key, self.IDS, digest, {3: 5, 2: 4})
        assert load_pairwise(tmp_path, key, digest) == {2: 4, 3: 5}
        loaded = load_alignment(tmp_path, key, digest)
        assert loaded is not None and loaded.tolist() == self.IDS.tolist()

    def test_none_saved_or_written_by_an_older_version_is_empty(self, tmp_path: Path) -> None:
        """A passive party's file, or one written before overlaps were kept, has none: {} (the IDs still load)."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        save_alignment(tmp_path, key, self.IDS, digest)
        assert load_pairwise(tmp_path, key, digest) == {}
        np.savez(  # the layout of an older version: no pairwise arrays
            cache_path(tmp_path, key),
            ids=np.asarray(self.IDS, dtype=str),
            key=np.frombuffer(key, np.uint8),
            id_digest=np.frombuffer(digest, np.uint8),
        )
        assert load_pairwise(tmp_path, key, digest) == {}
        assert load_alignment(tmp_path, key, digest) is not None

    def test_other_data_or_no_file_is_empty(self, tmp_path: Path) -> None:
        """Overlaps saved for another ID set, or no file at all, are not reported."""
        key, digest = alignment_key("job", DIGESTS), ids_digest(self.IDS)
        assert load_pairwise(tmp_path, key, digest) == {}
        save_alignment(tmp_path, key, self.IDS, digest, {2: 3})
        assert load_pairwise(tmp_path, key, ids_digest(self.IDS[:-1])) == {}


class TestCachedKeys:
    def test_lists_every_saved_key(self, tmp_path: Path) -> None:
        """Every saved alignment's key is listed, and nothing else in the folder."""
        keys = [alignment_key(f"job-{n}", DIGESTS) for n in range(3)]
        for key in keys:
            save_alignment(tmp_path, key, np.asarray(["a"], dtype=object), b"d" * 32)
        (tmp_path / "notes.txt").write_text("not an alignment")
        cache_path(tmp_path, alignment_key("corrupt", DIGESTS)).write_bytes(b"garbage")
        assert sorted(cached_keys(tmp_path)) == sorted(keys)

    def test_empty_or_missing_folder(self, tmp_path: Path) -> None:
        """A folder without alignments, or no folder at all, lists no keys."""
        assert cached_keys(tmp_path) == []
        assert cached_keys(tmp_path / "missing") == []
