"""PSI cryptographic core: RFC 9380 hash-to-curve, X25519 blinding, and the ECDH-PSI they make.

The RFC 9380 vectors are the published ones (Appendix J.4.2 for the curve25519 NU suite, K.3 for
expand_message_xmd with SHA-512). ``Reference`` below is a slow transcription of the RFC's steps
in plain Python integers (``pow`` for inverses, Euler's criterion, the RFC's sqrt for p = 5 mod 8),
written independently of the gmpy2 code it checks; it also computes y and clears the cofactor, so
the vectors' Q.y, P.x and P.y are checked too.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import random
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import gmpy2
import pytest

from vflcore.errors import VflError
from vflcore.psi import (
    BlindingKey,
    ParallelBlinder,
    PsiError,
    blind,
    encode_many,
    encode_to_u,
    hash_and_blind,
    make_dst,
)
from vflcore.psi.hash_to_curve import (
    DST_PREFIX,
    expand_message_xmd,
    hash_to_field,
    map_to_curve_elligator2,
)

P = 2**255 - 19
J = 486662

RFC_NU_DST = b"QUUX-V01-CS02-with-curve25519_XMD:SHA-512_ELL2_NU_"
RFC_MSGS = [b"", b"abc", b"abcdef0123456789", b"q128_" + b"q" * 128, b"a512_" + b"a" * 512]

# RFC 9380 Appendix J.4.2, curve25519_XMD:SHA-512_ELL2_NU_: (u[0], Q.x, Q.y, P.x, P.y) per message,
# field elements as the RFC prints them (big-endian hex).
RFC_NU_VECTORS = [
    (
        "608d892b641f0328523802a6603427c26e55e6f27e71a91a478148d45b5093cd",
        "51125222da5e763d97f3c10fcc92ea6860b9ccbbd2eb1285728f566721c1e65b",
        "343d2204f812d3dfc5304a5808c6c0d81a903a5d228b342442aa3c9ba5520a3d",
        "1bb913f0c9daefa0b3375378ffa534bda5526c97391952a7789eb976edfe4d08",
        "4548368f4f983243e747b62a600840ae7c1dab5c723991f85d3a9768479f3ec4",
    ),
    (
        "46f5b22494bfeaa7f232cc8d054be68561af50230234d7d1d63d1d9abeca8da5",
        "7d56d1e08cb0ccb92baf069c18c49bb5a0dcd927eff8dcf75ca921ef7f3e6eeb",
        "404d9a7dc25c9c05c44ab9a94590e7c3fe2dcec74533a0b24b188a5d5dacf429",
        "7c22950b7d900fa866334262fcaea47a441a578df43b894b4625c9b450f9a026",
        "5547bc00e4c09685dcbc6cb6765288b386d8bdcb595fa5a6e3969e08097f0541",
    ),
    (
        "235fe40c443766ce7e18111c33862d66c3b33267efa50d50f9e8e5d252a40aaa",
        "3fbe66b9c9883d79e8407150e7c2a1c8680bee496c62fabe4619a72b3cabe90f",
        "08ec476147c9a0a3ff312d303dbbd076abb7551e5fce82b48ab14b433f8d0a7b",
        "31ad08a8b0deeb2a4d8b0206ca25f567ab4e042746f792f4b7973f3ae2096c52",
        "405070c28e78b4fa269427c82827261991b9718bd6c6e95d627d701a53c30db1",
    ),
    (
        "001e92a544463bda9bd04ddbe3d6eed248f82de32f522669efc5ddce95f46f5b",
        "227e0bb89de700385d19ec40e857db6e6a3e634b1c32962f370d26f84ff19683",
        "5f86ff3851d262727326a32c1bf7655a03665830fa7f1b8b1e5a09d85bc66e4a",
        "027877759d155b1997d0d84683a313eb78bdb493271d935b622900459d52ceaa",
        "54d691731a53baa30707f4a87121d5169fb5d587d70fb0292b5830dedbec4c18",
    ),
    (
        "1a68a1af9f663592291af987203393f707305c7bac9c8d63d6a729bdc553dc19",
        "3bcd651ee54d5f7b6013898aab251ee8ecc0688166fce6e9548d38472f6bd196",
        "1bb36ad9197299f111b4ef21271c41f4b7ecf5543db8bb5931307ebdb2eaa465",
        "5fd892c0958d1a75f54c3182a18d286efab784e774d1e017ba2fb252998b5dc1",
        "750af3c66101737423a4519ac792fb93337bd74ee751f19da4cf1e94f4d6d0b8",
    ),
]

# RFC 9380 Appendix K.3, expand_message_xmd(SHA-512): (msg index, len_in_bytes, uniform_bytes).
RFC_XMD_DST = b"QUUX-V01-CS02-with-expander-SHA512-256"
RFC_XMD_VECTORS = [
    (0, 0x20, "6b9a7312411d92f921c6f68ca0b6380730a1a4d982c507211a90964c394179ba"),
    (1, 0x20, "0da749f12fbe5483eb066a5f595055679b976e93abe9be6f0f6318bce7aca8dc"),
    (2, 0x20, "087e45a86e2939ee8b91100af1583c4938e0f5fc6c9db4b107b83346bc967f58"),
    (3, 0x20, "7336234ee9983902440f6bc35b348352013becd88938d2afec44311caf8356b3"),
    (4, 0x20, "57b5f7e766d5be68a6bfe1768e3c2b7f1228b3e4b3134956dd73a59b954c66f4"),
    (
        0,
        0x80,
        "41b037d1734a5f8df225dd8c7de38f851efdb45c372887be655212d07251b921b052b62eaed99b46f72f2ef4cc96bfaf"
        "254ebbbec091e1a3b9e4fb5e5b619d2e0c5414800a1d882b62bb5cd1778f098b8eb6cb399d5d9d18f5d5842cf5d13d7e"
        "b00a7cff859b605da678b318bd0e65ebff70bec88c753b159a805d2c89c55961",
    ),
    (
        1,
        0x80,
        "7f1dddd13c08b543f2e2037b14cefb255b44c83cc397c1786d975653e36a6b11bdd7732d8b38adb4a0edc26a0cef4bb4"
        "5217135456e58fbca1703cd6032cb1347ee720b87972d63fbf232587043ed2901bce7f22610c0419751c065922b48843"
        "1851041310ad659e4b23520e1772ab29dcdeb2002222a363f0c2b1c972b3efe1",
    ),
    (
        2,
        0x80,
        "3f721f208e6199fe903545abc26c837ce59ac6fa45733f1baaf0222f8b7acb0424814fcb5eecf6c1d38f06e9d0a6ccfb"
        "f85ae612ab8735dfdf9ce84c372a77c8f9e1c1e952c3a61b7567dd0693016af51d2745822663d0c2367e3f4f0bed827f"
        "eecc2aaf98c949b5ed0d35c3f1023d64ad1407924288d366ea159f46287e61ac",
    ),
    (
        3,
        0x80,
        "b799b045a58c8d2b4334cf54b78260b45eec544f9f2fb5bd12fb603eaee70db7317bf807c406e26373922b7b8920fa29"
        "142703dd52bdf280084fb7ef69da78afdf80b3586395b433dc66cde048a258e476a561e9deba7060af40adf30c64249c"
        "a7ddea79806ee5beb9a1422949471d267b21bc88e688e4014087a0b592b695ed",
    ),
    (
        4,
        0x80,
        "05b0bfef265dcee87654372777b7c44177e2ae4c13a27f103340d9cd11c86cb2426ffcad5bd964080c2aee97f03be1ca"
        "18e30a1f14e27bc11ebbd650f305269cc9fb1db08bf90bfc79b42a952b46daf810359e7bc36452684784a64952c343c5"
        "2e5124cd1f71d474d5197fefc571a92929c9084ffe1112cf5eea5192ebff330b",
    ),
]

# u-coordinates whose X25519 product is the neutral element for every key: 0, 1, the two points of
# order 8, and non-canonical encodings of them (p-1, p, p+1, and 0/1 with bit 255 set).
LOW_ORDER = [
    bytes(32),
    (1).to_bytes(32, "little"),
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    bytes.fromhex("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
    (P - 1).to_bytes(32, "little"),
    P.to_bytes(32, "little"),
    (P + 1).to_bytes(32, "little"),
    (2**255).to_bytes(32, "little"),
    (2**255 + 1).to_bytes(32, "little"),
]


class Reference:
    """RFC 9380 §6.7.1 / Appendix I.2 in plain integers: slow, obvious, independent of gmpy2."""

    @staticmethod
    def is_square(a: int) -> bool:
        return pow(a, (P - 1) // 2, P) in (0, 1)

    @staticmethod
    def sqrt(a: int) -> int:  # sqrt_5mod8
        root = pow(a, (P + 3) // 8, P)
        if root * root % P != a % P:
            root = root * pow(2, (P - 1) // 4, P) % P
        assert root * root % P == a % P
        return root

    @classmethod
    def map_to_curve(cls, r: int) -> tuple[int, int]:
        d = (1 + 2 * r * r) % P
        x1 = -J * pow(d, P - 2, P) % P  # inv0
        if x1 == 0:
            x1 = -J % P
        gx1 = (x1**3 + J * x1**2 + x1) % P
        x2 = (-x1 - J) % P
        gx2 = (x2**3 + J * x2**2 + x2) % P
        if cls.is_square(gx1):
            x, y = x1, cls.sqrt(gx1)
            if y % 2 != 1:
                y = P - y
        else:
            x, y = x2, cls.sqrt(gx2)
            if y % 2 != 0:
                y = P - y
        return x, y

    @staticmethod
    def ladder(k: int, u: int) -> int:
        """RFC 7748 §5 Montgomery ladder, x-only, with the scalar used as given (no clamping)."""
        x2, z2, x3, z3, swap = 1, 0, u, 1, 0
        for t in reversed(range(256)):
            bit = (k >> t) & 1
            if swap ^ bit:
                x2, x3, z2, z3 = x3, x2, z3, z2
            swap = bit
            a, b, c, d = x2 + z2, x2 - z2, x3 + z3, x3 - z3
            aa, bb, da, cb = a * a % P, b * b % P, d * a % P, c * b % P
            e = aa - bb
            x3, z3 = (da + cb) ** 2 % P, u * (da - cb) ** 2 % P
            x2, z2 = aa * bb % P, e * (aa + 121665 * e) % P
        if swap:
            x2, z2 = x3, z3
        return x2 * pow(z2, P - 2, P) % P

    @staticmethod
    def double(x: int, y: int) -> tuple[int, int]:
        """Affine doubling on v² = u³ + J·u² + u."""
        lam = (3 * x * x + 2 * J * x + 1) * pow(2 * y, P - 2, P) % P
        x3 = (lam * lam - J - 2 * x) % P
        return x3, (lam * (x - x3) - y) % P


def u_int(u: bytes) -> int:
    return int.from_bytes(u, "little")


def on_curve(u: bytes) -> bool:
    """u³ + J·u² + u is a square: u is the x of a curve point, not of a twist point."""
    x = u_int(u)
    return bool(gmpy2.legendre((x**3 + J * x * x + x) % P, P) >= 0)


def ecdh_psi(a_ids: list[str], b_ids: list[str]) -> set[str]:
    """Two-party ECDH-PSI with these primitives, as A sees it: A's IDs that B also holds."""
    dst = make_dst("test-job")
    ka, kb = BlindingKey.generate(), BlindingKey.generate()
    a_once = hash_and_blind([i.encode() for i in a_ids], dst, ka)  # A -> B
    b_once = hash_and_blind([i.encode() for i in b_ids], dst, kb)  # B -> A
    a_twice = blind(a_once, kb)  # B -> A, in A's order
    b_twice = set(blind(b_once, ka))  # A, locally
    return {i for i, v in zip(a_ids, a_twice, strict=True) if v in b_twice}


class TestRfc9380Vectors:
    def test_expand_message_xmd_sha512(self) -> None:
        """Appendix K.3: all ten expand_message_xmd(SHA-512) vectors."""
        for index, length, expected in RFC_XMD_VECTORS:
            assert expand_message_xmd(RFC_MSGS[index], RFC_XMD_DST, length).hex() == expected, (index, length)

    def test_hash_to_field_gives_u0(self) -> None:
        for msg, (u0, *_) in zip(RFC_MSGS, RFC_NU_VECTORS, strict=True):
            assert hash_to_field(msg, RFC_NU_DST) == [int(u0, 16)]

    def test_hash_to_field_count_2(self) -> None:
        """Appendix J.4.1 (the RO suite, two field elements per message), first vector: u[0], u[1]."""
        dst = b"QUUX-V01-CS02-with-curve25519_XMD:SHA-512_ELL2_RO_"
        assert hash_to_field(b"", dst, 2) == [
            0x005FE8A7B8FEF0A16C105E6CADF5A6740B3365E18692A9C05BFBB4D97F645A6A,
            0x1347EDBEC6A2B5D8C02E058819819BEE177077C9D10A4CE165AAB0FD0252261A,
        ]

    def test_map_to_curve_gives_qx(self) -> None:
        for u0, qx, *_ in RFC_NU_VECTORS:
            assert map_to_curve_elligator2(int(u0, 16)) == int(qx, 16)

    def test_encode_to_u_and_encode_many_give_qx_little_endian(self) -> None:
        expected = [int(qx, 16).to_bytes(32, "little") for _, qx, *_ in RFC_NU_VECTORS]
        assert [encode_to_u(m, RFC_NU_DST) for m in RFC_MSGS] == expected
        assert encode_many(RFC_MSGS, RFC_NU_DST) == expected

    def test_reference_gives_q_and_p(self) -> None:
        """The reference reproduces Q = (x, y) and P = 8·Q, so it can judge the fast code below."""
        for u0, qx, qy, px, py in RFC_NU_VECTORS:
            x, y = Reference.map_to_curve(int(u0, 16))
            assert (x, y) == (int(qx, 16), int(qy, 16))
            for _ in range(3):
                x, y = Reference.double(x, y)
            assert (x, y) == (int(px, 16), int(py, 16))

    def test_x25519_clears_the_cofactor(self) -> None:
        """k·Q == (k/8)·P for the clamped k: blinding Q is blinding the RFC's P = 8·Q by another key."""
        key = BlindingKey.generate()
        clamped = bytearray(key._raw())
        clamped[0] &= 248
        clamped[31] = (clamped[31] & 127) | 64
        k = int.from_bytes(clamped, "little")
        for msg, (_, qx, _, px, _) in zip(RFC_MSGS, RFC_NU_VECTORS, strict=True):
            (blinded,) = blind([encode_to_u(msg, RFC_NU_DST)], key)
            assert u_int(blinded) == Reference.ladder(k, int(qx, 16))
            assert u_int(blinded) == Reference.ladder(k // 8, int(px, 16))


class TestHashToCurve:
    def test_fast_path_matches_reference_on_random_messages(self) -> None:
        rng = random.Random(9380)
        msgs = [rng.randbytes(rng.randrange(0, 200)) for _ in range(150)]
        dst = make_dst("reference")
        fast = encode_many(msgs, dst)
        for msg, u in zip(msgs, fast, strict=True):
            (r,) = hash_to_field(msg, dst)
            assert u_int(u) == Reference.map_to_curve(r)[0]

    def test_encode_many_equals_encode_to_u_across_batches(self) -> None:
        """More than one batch of the shared inversion (1024), and a ragged last batch."""
        msgs = [f"id-{i}".encode() for i in range(1100)]
        dst = make_dst("batch")
        assert encode_many(msgs, dst) == [encode_to_u(m, dst) for m in msgs]
        assert encode_many([], dst) == []

    def test_every_output_is_on_the_curve_none_on_the_twist(self) -> None:
        ids = [str(i).encode() for i in range(5000)]
        outputs = encode_many(ids, make_dst("curve"))
        assert all(len(u) == 32 and u_int(u) < P for u in outputs)
        assert all(on_curve(u) for u in outputs)
        # The check has teeth: raw hashes as u-coordinates land on the twist about half the time.
        raw = [hashlib.sha256(i).digest() for i in ids[:400]]
        assert 120 < sum(not on_curve(u) for u in raw) < 280

    def test_deterministic_and_distinct(self) -> None:
        ids = [str(i).encode() for i in range(2000)]
        dst = make_dst("job-1")
        first = encode_many(ids, dst)
        assert encode_many(ids, dst) == first
        assert len(set(first)) == len(ids)

    def test_domain_separation(self) -> None:
        ids = [str(i).encode() for i in range(200)]
        one, two = encode_many(ids, make_dst("job-1")), encode_many(ids, make_dst("job-2"))
        assert not set(one) & set(two)
        assert encode_to_u(b"x", RFC_NU_DST) != encode_to_u(b"x", make_dst("x"))

    def test_make_dst(self) -> None:
        assert make_dst("job-7") == DST_PREFIX + b"|job=job-7"
        assert DST_PREFIX == b"VFL-PSI-V01-CS01-with-curve25519_XMD:SHA-512_ELL2_NU_"
        assert make_dst("é") == DST_PREFIX + b"|job=\xc3\xa9"
        with pytest.raises(ValueError, match="empty"):
            make_dst("")
        with pytest.raises(TypeError):
            make_dst(b"job")  # type: ignore[arg-type]

    def test_oversize_dst_is_hashed_per_rfc_5_3_3(self) -> None:
        long_dst = make_dst("j" * 300)
        assert len(long_dst) > 255
        reduced = hashlib.sha512(b"H2C-OVERSIZE-DST-" + long_dst).digest()
        assert expand_message_xmd(b"abc", long_dst, 48) == expand_message_xmd(b"abc", reduced, 48)
        assert encode_many([b"abc"], long_dst) == [encode_to_u(b"abc", reduced)]

    def test_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="empty"):
            encode_to_u(b"x", b"")
        with pytest.raises(TypeError):
            encode_many([b"x"], "dst")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="len_in_bytes"):
            expand_message_xmd(b"x", b"dst", 255 * 64 + 1)

    def test_the_one_low_order_hash_is_refused_not_blinded(self) -> None:
        """r = 0 maps to u = 0 (order 2): probability ~2^-255 per ID, and blind() raises on it."""
        assert map_to_curve_elligator2(0) == 0
        with pytest.raises(PsiError, match="low-order"):
            blind([map_to_curve_elligator2(0).to_bytes(32, "little")], BlindingKey.generate())


class TestBlinding:
    def test_commutative(self) -> None:
        a, b = BlindingKey.generate(), BlindingKey.generate()
        points = encode_many([str(i).encode() for i in range(50)], make_dst("c"))
        ab = blind(blind(points, b), a)
        assert ab == blind(blind(points, a), b)
        assert blind(points, a) != blind(points, b)
        assert len(set(ab)) == len(points)

    def test_blinded_points_stay_on_the_curve(self) -> None:
        points = encode_many([str(i).encode() for i in range(100)], make_dst("c"))
        assert all(on_curve(u) for u in blind(points, BlindingKey.generate()))

    def test_hash_and_blind_is_encode_then_blind(self) -> None:
        key, dst = BlindingKey.generate(), make_dst("hb")
        ids = [b"a", b"b", b"c"]
        assert hash_and_blind(ids, dst, key) == blind(encode_many(ids, dst), key)

    @pytest.mark.parametrize("bad", LOW_ORDER, ids=lambda u: u.hex()[:8] + "…" + u.hex()[-2:])
    def test_low_order_points_are_rejected_with_their_index(self, bad: bytes) -> None:
        good = encode_many([b"1", b"2", b"3"], make_dst("lo"))
        with pytest.raises(PsiError, match="point 3 is a low-order point") as caught:
            blind([*good, bad, good[0]], BlindingKey.generate())
        assert caught.value.index == 3
        assert isinstance(caught.value, VflError)

    def test_malformed_points_are_rejected(self) -> None:
        key = BlindingKey.generate()
        with pytest.raises(PsiError, match="point 1 is 31 bytes long") as caught:
            blind([bytes(32 * [9]), bytes(31)], key)
        assert caught.value.index == 1
        with pytest.raises(PsiError, match="point 0 is a str"):
            blind(["x" * 32], key)  # type: ignore[list-item]

    def test_psi_error_survives_pickling(self) -> None:
        error = pickle.loads(pickle.dumps(PsiError("point 5 is bad", 5)))
        assert isinstance(error, PsiError) and error.index == 5 and str(error) == "point 5 is bad"

    def test_key_is_redacted_and_cannot_be_pickled(self) -> None:
        key = BlindingKey.generate()
        raw = key._raw()
        for text in (repr(key), str(key), f"{key}", repr([key])):
            assert "redacted" in text and raw.hex() not in text
        for dump in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="cannot be pickled"):
                dump(key)

    def test_keys_are_fresh(self) -> None:
        assert len({BlindingKey.generate()._raw() for _ in range(20)}) == 20


class TestEcdhPsi:
    def test_partial_overlap(self) -> None:
        rng = random.Random(1)
        universe = [f"user-{rng.getrandbits(40)}" for _ in range(300)]
        a, b = universe[:200], universe[120:]
        assert ecdh_psi(a, b) == set(a) & set(b)
        assert len(set(a) & set(b)) == 80

    def test_no_overlap(self) -> None:
        assert ecdh_psi([f"a{i}" for i in range(50)], [f"b{i}" for i in range(60)]) == set()

    def test_full_overlap(self) -> None:
        ids = [f"x{i}" for i in range(64)]
        assert ecdh_psi(ids, list(reversed(ids))) == set(ids)

    def test_single_element(self) -> None:
        assert ecdh_psi(["only"], ["only"]) == {"only"}
        assert ecdh_psi(["only"], ["other"]) == set()

    def test_unicode_ids(self) -> None:
        a = ["José", "Zoë", "北京-001", "😀", "Ａ"]  # "Ａ" is fullwidth: a different ID from "A"
        b = ["Zoë", "😀", "北京-001", "A", "Jose"]
        assert ecdh_psi(a, b) == {"Zoë", "😀", "北京-001"}

    def test_integer_like_ids_match_as_bytes(self) -> None:
        """IDs are compared byte for byte: "7", "07" and "7.0" are three different IDs."""
        a = [str(i) for i in range(0, 100, 2)] + ["07", "7.0"]
        b = [str(i) for i in range(0, 100, 3)]
        assert ecdh_psi(a, b) == {str(i) for i in range(0, 100, 6)}


@pytest.fixture(scope="module")
def pool_and_key() -> Iterator[tuple[ParallelBlinder, BlindingKey]]:
    key = BlindingKey.generate()
    with ParallelBlinder(key, workers=2, chunk_size=64) as pool:
        yield pool, key


class TestParallelBlinder:
    def test_hash_and_blind_equals_serial_in_order(self, pool_and_key: tuple[ParallelBlinder, BlindingKey]) -> None:
        pool, key = pool_and_key
        ids = [f"id-{i}".encode() for i in range(1000)]
        dst = make_dst("par")
        seen: list[tuple[int, int]] = []
        out = pool.hash_and_blind(ids, dst, progress=lambda done, total: seen.append((done, total)))
        assert out == hash_and_blind(ids, dst, key)
        assert len(seen) == 16 and seen[-1] == (1000, 1000)
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)
        assert pool.hash_and_blind_packed(ids, dst) == b"".join(out)

    def test_blind_equals_serial_in_order(self, pool_and_key: tuple[ParallelBlinder, BlindingKey]) -> None:
        pool, key = pool_and_key
        other = BlindingKey.generate()
        once = hash_and_blind([str(i).encode() for i in range(300)], make_dst("par"), other)
        assert pool.blind(once) == blind(once, key)
        assert pool.blind([]) == [] and pool.hash_and_blind([], make_dst("par")) == []

    def test_worker_errors_name_the_global_index(self, pool_and_key: tuple[ParallelBlinder, BlindingKey]) -> None:
        pool, _ = pool_and_key
        points = encode_many([str(i).encode() for i in range(200)], make_dst("par"))
        points[150] = bytes(32)
        with pytest.raises(PsiError, match="point 150 is a low-order point") as caught:
            pool.blind(points)
        assert caught.value.index == 150
        assert pool.blind(points[:10]) == blind(points[:10], pool_and_key[1])  # still usable

    def test_spawn_start_method(self) -> None:
        key = BlindingKey.generate()
        ids = [str(i).encode() for i in range(40)]
        with ParallelBlinder(key, workers=1, chunk_size=16, start_method="spawn") as pool:
            assert pool.hash_and_blind(ids, make_dst("spawn")) == hash_and_blind(ids, make_dst("spawn"), key)

    def test_workers_do_not_rerun_the_main_module(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # In the daemons __main__ is the console script, which imports the whole service (torch,
        # grpc): a worker re-running it cost 3 s of CPU and ~290 MiB. It must not run at all.
        marker = tmp_path / "main-was-run"
        script = tmp_path / "fake_main.py"
        script.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
        fake = types.ModuleType("__main__")
        fake.__file__ = str(script)
        fake.__spec__ = None
        monkeypatch.setitem(sys.modules, "__main__", fake)
        key = BlindingKey.generate()
        ids = [str(i).encode() for i in range(40)]
        for method in ("forkserver", "spawn"):
            with ParallelBlinder(key, workers=1, chunk_size=16, start_method=method) as pool:
                assert pool.hash_and_blind(ids, make_dst("main")) == hash_and_blind(ids, make_dst("main"), key)
            assert not marker.exists(), f"a {method} worker ran the parent's main module"
        assert fake.__file__ == str(script) and fake.__spec__ is None  # put back

    def test_arguments_and_lifecycle(self) -> None:
        key = BlindingKey.generate()
        with pytest.raises(ValueError, match="fork is unsafe"):
            ParallelBlinder(key, start_method="fork")
        with pytest.raises(ValueError, match="workers"):
            ParallelBlinder(key, workers=0)
        with pytest.raises(ValueError, match="chunk_size"):
            ParallelBlinder(key, chunk_size=0)
        blinder = ParallelBlinder(key, workers=1)
        assert "redacted" not in repr(blinder) and key._raw().hex() not in repr(blinder)
        with pytest.raises(RuntimeError, match="not open"):
            blinder.blind([bytes(32)])
        assert ParallelBlinder(key).workers >= 1
