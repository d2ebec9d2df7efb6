"""The multi-buffer X25519 gives OpenSSL's bytes on every input, and its refusals (issue 37).

Compared item by item with ``cryptography`` (OpenSSL), the blinder PSI used alone before: random
points, the points X25519 treats specially (low order, non-canonical u, bit 255 set), every
batch length around the eight lanes, and whole PSI runs with the two parties on different paths.
Skipped, saying why, where the library cannot run (no wheel, another CPU without AVX-512 IFMA).
"""

from __future__ import annotations

import os
import random

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vflcore.errors import ConfigError, PsiError
from vflcore.psi import x25519
from vflcore.psi.blinding import BlindingKey, ParallelBlinder, blind, hash_and_blind
from vflcore.psi.hash_to_curve import encode_many
from vflcore.psi.x25519_mb import Unavailable, load
from vfltesting.datasets import example_ids

P = 2**255 - 19
LOADED = load()
needs_multibuffer = pytest.mark.skipif(
    isinstance(LOADED, Unavailable), reason=f"multi-buffer X25519 cannot run here: {getattr(LOADED, 'reason', '')}"
)

#: u-coordinates of Curve25519's points of order 1, 2, 4 and 8 (RFC 7748 and the libsodium
#: blocklist), canonical and not: each gives the all-zero product, which OpenSSL refuses.
LOW_ORDER = [
    0,
    1,
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
    P - 1,
    P,
    P + 1,
]


def _u(value: int) -> bytes:
    return value.to_bytes(32, "little")


def _openssl(secret: bytes, u: bytes) -> bytes | None:
    """OpenSSL's X25519, None where it refuses (the all-zero product)."""
    try:
        return X25519PrivateKey.from_private_bytes(secret).exchange(X25519PublicKey.from_public_bytes(u))
    except ValueError:
        return None


@pytest.fixture(autouse=True)
def _setting_restored() -> object:
    before = x25519.current()
    yield
    x25519.use(before)


@needs_multibuffer
class TestSameBytes:
    def test_random_points_and_unclamped_secrets(self) -> None:
        rng = random.Random(37)
        for _ in range(8):
            secret = rng.randbytes(32)  # X25519 clamps the scalar: both must
            points = [rng.randbytes(32) for _ in range(203)]
            expected = [_openssl(secret, u) for u in points]
            assert None not in expected
            assert LOADED.exchange_packed(secret, b"".join(points)) == b"".join(e for e in expected if e)

    def test_bit_255_set_and_non_canonical_u(self) -> None:
        secret = os.urandom(32)
        points = [_u(P + k) for k in range(2, 19)]  # p+2 ... 2^255-1: reduced mod p by both
        points += [bytes([*u[:31], u[31] | 0x80]) for u in (os.urandom(32) for _ in range(9))]  # bit 255 set
        expected = [_openssl(secret, u) for u in points]
        assert None not in expected
        assert LOADED.exchange_packed(secret, b"".join(points)) == b"".join(e for e in expected if e)

    @pytest.mark.parametrize("count", [1, 7, 8, 9, 15, 16, 17, 63])
    def test_a_batch_of_any_length(self, count: int) -> None:
        secret = os.urandom(32)
        points = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(count)]
        out = LOADED.exchange_packed(secret, b"".join(points))
        assert out == b"".join(_openssl(secret, u) or b"" for u in points)

    @pytest.mark.parametrize("low", LOW_ORDER + [u | 1 << 255 for u in LOW_ORDER])  # bit 255 set too
    @pytest.mark.parametrize("place", [0, 5, 8, 12])
    def test_a_low_order_point_is_refused_at_its_place(self, low: int, place: int) -> None:
        secret = os.urandom(32)
        points = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(13)]
        points[place] = _u(low)
        assert _openssl(secret, points[place]) is None  # OpenSSL refuses it too
        with pytest.raises(PsiError) as refused:
            LOADED.exchange_packed(secret, b"".join(points))
        assert refused.value.index == place

    def test_the_blinders_refuse_the_same_point_with_the_same_error(self) -> None:
        key = BlindingKey.generate()
        points = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(20)]
        points[11] = _u(LOW_ORDER[2])
        errors = []
        for setting in ("openssl", "multibuffer"):
            x25519.use(setting)
            with pytest.raises(PsiError) as refused:
                blind(points, key)
            errors.append((str(refused.value), refused.value.index))
        assert errors[0] == errors[1]
        assert errors[0][1] == 11


@needs_multibuffer
class TestMixedParties:
    """Two parties on different X25519 paths still intersect: the bytes are the same."""

    def test_a_multibuffer_party_and_an_openssl_party(self) -> None:
        ids_a = [i.encode() for i in example_ids(3000)]
        ids_b = [i.encode() for i in example_ids(4000)[1000:]]
        dst = b"vfl-psi-test"
        key_a, key_b = BlindingKey.generate(), BlindingKey.generate()
        x25519.use("multibuffer")
        once_a = hash_and_blind(ids_a, dst, key_a)
        x25519.use("openssl")
        once_b = hash_and_blind(ids_b, dst, key_b)
        twice_a = blind(once_a, key_b)  # party B (OpenSSL) blinds A's values
        x25519.use("multibuffer")
        twice_b = blind(once_b, key_a)  # party A (multi-buffer) blinds B's
        common = set(twice_a) & set(twice_b)
        assert len(common) == len(set(ids_a) & set(ids_b)) == 2000
        x25519.use("openssl")
        assert blind(once_b, key_a) == twice_b  # the same bytes as OpenSSL's would have been

    def test_worker_processes_run_the_setting_they_are_given(self) -> None:
        points = encode_many([i.encode() for i in example_ids(5000)], b"dst")
        key = BlindingKey.generate()
        outputs = []
        for setting in ("openssl", "multibuffer"):
            x25519.use(setting)
            with ParallelBlinder(key, workers=2, chunk_size=999) as pool:  # 999: not a multiple of 8
                outputs.append(pool.blind_packed(points))
        assert outputs[0] == outputs[1]


class TestChoice:
    def test_openssl_is_always_there(self) -> None:
        assert x25519.choose("openssl").name == "openssl"

    def test_a_wrong_value_names_the_setting_and_the_choices(self) -> None:
        with pytest.raises(ConfigError, match=r"\[psi\] x25519 = 'fast'.*'auto', 'multibuffer', 'openssl'"):
            x25519.choose("fast")

    def test_auto_falls_back_and_multibuffer_refuses_where_the_library_cannot_run(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # a host whose CPU lacks IFMA, as the library would report it
        monkeypatch.setattr(
            x25519, "load", lambda: Unavailable("this CPU lacks AVX-512 IFMA, which mbx_x25519_mb8 needs")
        )
        assert x25519.choose("auto") == x25519.Choice(
            "openssl", "this CPU lacks AVX-512 IFMA, which mbx_x25519_mb8 needs"
        )
        with pytest.raises(
            ConfigError, match=r'"multibuffer", but this CPU lacks AVX-512 IFMA.*set "auto" or "openssl"'
        ):
            x25519.choose("multibuffer")

    @needs_multibuffer
    def test_auto_takes_the_multibuffer_path_where_it_runs(self) -> None:
        choice = x25519.choose("auto")
        assert choice.name == "multibuffer" and "libcrypto_mb.so" in choice.reason
