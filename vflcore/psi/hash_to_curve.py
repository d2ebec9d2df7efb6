"""Hash sample IDs to Curve25519 u-coordinates: RFC 9380 suite ``curve25519_XMD:SHA-512_ELL2_NU_``.

ECDH-PSI needs a map ``ID -> point`` that nobody can invert or steer. A raw hash used as the
u-coordinate is wrong: half of all u values lie on the quadratic twist, and "curve or twist" is
preserved by every X25519 multiplication, so the peer learns one bit per ID. Elligator 2
(RFC 9380 §6.7.1) always lands on the curve.

Pipeline for one ID (the *encode_to_curve* / NU variant, §3):

    r = hash_to_field(id, DST, count=1)      expand_message_xmd(SHA-512), L = 48 bytes, mod p
    Q = map_to_curve_elligator2(r)           a point of curve25519, u-coordinate only
    P = clear_cofactor(Q) = 8·Q              not done here, see below

Cofactor clearing. Curve25519 has order 8·ℓ and Q may carry a small-order component. RFC 9380
clears it with h_eff = 8. We skip that step on purpose: X25519 clamps every scalar to a multiple
of 8, so the first blinding ``k·Q = (k/8)·(8·Q) = (k/8)·P`` already removes the small-order part,
and every value that leaves a party lies in the prime-order subgroup. Both parties hash the same
way, so equal IDs still meet; the u-coordinates returned here are the RFC vectors' ``Q.x``, not
``P.x`` (the tests check both, P by doubling Q three times).

Only the u-coordinate is computed: X25519 ignores the sign of y, and ``x`` is chosen between
``x1`` and ``x2`` exactly as RFC 9380 does, so outputs equal the RFC test vectors' ``Q.x``.

Field maths uses gmpy2 (GMP): its Legendre symbol and inversion are 30–130× faster than Python's
``pow``. None of this is constant-time (a branch and GMP's variable-time gcd depend on the ID's
hash). That is acceptable here: a party hashes only its own IDs, in its own process, and only
blinded points leave it, so a network peer sees timing of whole batches, never of one ID.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Final

import gmpy2
from gmpy2 import mpz

__all__ = [
    "DST_PREFIX",
    "SUITE_ID",
    "encode_many",
    "encode_to_u",
    "expand_message_xmd",
    "hash_to_field",
    "make_dst",
    "map_to_curve_elligator2",
]

SUITE_ID: Final = b"curve25519_XMD:SHA-512_ELL2_NU_"
# RFC 9380 §3.1: "<application>-V<version>-CS<ciphersuite>-with-<suite ID>"; the job tag follows.
DST_PREFIX: Final = b"VFL-PSI-V01-CS01-with-" + SUITE_ID

P: Final = 2**255 - 19  # the field GF(p)
J: Final = 486662  # curve25519: v² = u³ + J·u² + u   (Montgomery form with K = 1)
Z: Final = 2  # the Elligator 2 non-square for this field (RFC 9380 §6.7.1, suite table)
L: Final = 48  # ceil((ceil(log2(p)) + k) / 8) with k = 128: bytes hashed per field element
U_BYTES: Final = 32  # an X25519 u-coordinate: little-endian, RFC 7748

_B_IN_BYTES: Final = 64  # SHA-512 output size
_S_IN_BYTES: Final = 128  # SHA-512 input block size
_MAX_DST: Final = 255
_OVERSIZE_PREFIX: Final = b"H2C-OVERSIZE-DST-"

# gmpy2 copies of the constants, so the hot loop never converts.
_P: Final = mpz(P)
_MINUS_J: Final = mpz(P - J)  # -J mod p
_J: Final = mpz(J)
_BATCH: Final = 1024  # IDs per shared inversion in encode_many

# CPython's built-in SHA-512 (no OpenSSL EVP set-up per object) is ~1.5x faster than hashlib's on
# these short inputs. It is a private module (``_sha512`` up to 3.11, ``_sha2`` from 3.12), so fall
# back to hashlib; the output is the same SHA-512 either way and the RFC vectors test both paths.
_sha512_fast: Callable[[bytes], Any]
try:
    from _sha2 import sha512 as _sha512_fast  # type: ignore[import-not-found, no-redef]
except ImportError:  # pragma: no cover - depends on the Python version
    try:
        from _sha512 import sha512 as _sha512_fast  # type: ignore[import-not-found, no-redef]
    except ImportError:
        _sha512_fast = hashlib.sha512
# SHA-512 state after absorbing Z_pad (one whole block of zeros): copying it skips one compression
# per ID and is bit-identical to hashing Z_pad || msg.
_ZPAD_STATE: Final = _sha512_fast(bytes(_S_IN_BYTES))


def _dst_prime(dst: bytes) -> bytes:
    """DST || I2OSP(len(DST), 1), with an over-long DST first reduced per RFC 9380 §5.3.3."""
    if not isinstance(dst, bytes | bytearray):
        raise TypeError(f"dst must be bytes, not {type(dst).__name__}")
    if not dst:
        raise ValueError("dst must not be empty (RFC 9380 §3.1: a DST is at least one byte)")
    if len(dst) > _MAX_DST:
        dst = hashlib.sha512(_OVERSIZE_PREFIX + dst).digest()
    return bytes(dst) + len(dst).to_bytes(1, "big")


def expand_message_xmd(msg: bytes, dst: bytes, len_in_bytes: int) -> bytes:
    """RFC 9380 §5.3.1 with H = SHA-512: ``len_in_bytes`` uniformly random bytes from ``msg``.

    A DST longer than 255 bytes is first replaced by ``SHA-512("H2C-OVERSIZE-DST-" || DST)``
    (§5.3.3).
    """
    ell = -(-len_in_bytes // _B_IN_BYTES)
    if len_in_bytes <= 0 or ell > 255 or len_in_bytes > 65535:
        raise ValueError(f"len_in_bytes must be in 1..{255 * _B_IN_BYTES}, got {len_in_bytes}")
    dst_prime = _dst_prime(dst)
    msg_prime = bytes(_S_IN_BYTES) + msg + len_in_bytes.to_bytes(2, "big") + b"\x00" + dst_prime
    b_0 = hashlib.sha512(msg_prime).digest()
    b_i = hashlib.sha512(b_0 + b"\x01" + dst_prime).digest()
    uniform = [b_i]
    for i in range(2, ell + 1):
        mixed = bytes(x ^ y for x, y in zip(b_0, b_i, strict=True))
        b_i = hashlib.sha512(mixed + i.to_bytes(1, "big") + dst_prime).digest()
        uniform.append(b_i)
    return b"".join(uniform)[:len_in_bytes]


def hash_to_field(msg: bytes, dst: bytes, count: int = 1) -> list[int]:
    """RFC 9380 §5.2 for GF(p), p = 2^255 - 19, m = 1, L = 48: ``count`` field elements."""
    uniform = expand_message_xmd(msg, dst, count * L)
    return [int.from_bytes(uniform[L * i : L * (i + 1)], "big") % P for i in range(count)]


def map_to_curve_elligator2(r: int) -> int:
    """RFC 9380 §6.7.1 for curve25519 (J = 486662, K = 1, Z = 2): the u-coordinate of the point.

    Returns ``x`` as an integer in [0, p). The y-coordinate is not computed (X25519 does not use
    it); the choice between ``x1`` and ``x2`` is the RFC's, so the result is the vectors' ``Q.x``.
    """
    r = mpz(r) % _P
    d = (r * r * Z + 1) % _P  # 1 + Z·r²; never 0 because -1/Z = -1/2 is a non-square mod p
    x1 = (_MINUS_J * gmpy2.invert(d, _P)) % _P if d else _MINUS_J  # -J / (1 + Z·r²), inv0 semantics
    if x1 == 0:  # step 2 of §6.7.1; unreachable for this curve (it needs d == 0), kept for fidelity
        x1 = _MINUS_J
    gx1 = (x1 * ((x1 + _J) * x1 + 1)) % _P  # x1³ + J·x1² + x1
    if gmpy2.legendre(gx1, _P) >= 0:  # is_square(gx1); is_square(0) is true in RFC 9380
        return int(x1)
    return int((_MINUS_J - x1) % _P)  # x2 = -x1 - J, and then gx2 = Z·r²·gx1 is a square


def encode_to_u(message: bytes, dst: bytes) -> bytes:
    """``encode_to_curve`` (NU) for one message: the 32-byte little-endian u-coordinate of Q.

    See the module docstring for why the cofactor is not cleared here.
    """
    (r,) = hash_to_field(message, dst, 1)
    return map_to_curve_elligator2(r).to_bytes(U_BYTES, "little")


def encode_many(messages: Sequence[bytes], dst: bytes) -> list[bytes]:
    """``encode_to_u`` for every message, in order; about twice as fast as a loop over it.

    The same computation with the per-call work hoisted out: DST' and the SHA-512 state after
    Z_pad are computed once, expand_message_xmd is unrolled for its single 64-byte block (L = 48
    needs ell = 1), the field maths stays in gmpy2 integers from hash to output bytes, and the
    inversions ``1 / (1 + 2·r²)`` of a batch share one ``gmpy2.invert`` (Montgomery's trick).
    """
    dst_prime = _dst_prime(dst)
    # msg_prime = Z_pad || msg || I2OSP(48, 2) || I2OSP(0, 1) || DST'; Z_pad is in the copied state.
    suffix0 = L.to_bytes(2, "big") + b"\x00" + dst_prime
    suffix1 = b"\x01" + dst_prime  # b_1 = H(b_0 || I2OSP(1, 1) || DST')
    new_state = _ZPAD_STATE.copy
    sha512 = _sha512_fast
    from_bytes = mpz.from_bytes
    invert = gmpy2.invert
    legendre = gmpy2.legendre
    p, minus_j, j, one = _P, _MINUS_J, _J, mpz(1)
    out: list[bytes] = []
    for start in range(0, len(messages), _BATCH):
        # Pass 1: hash to field; d = 1 + 2·r² (left unreduced: only its value mod p matters) and
        # the running products d_0·…·d_(i-1) mod p.
        ds: list[mpz] = []
        prefix: list[mpz] = []
        acc = one
        for msg in messages[start : start + _BATCH]:
            h = new_state()
            h.update(msg)
            h.update(suffix0)
            r = from_bytes(sha512(h.digest() + suffix1).digest()[:L], "big")
            d = r * r * 2 + 1
            prefix.append(acc)
            ds.append(d)
            acc = acc * d % p
        # Pass 2, backwards: inv = -J / (d_0·…·d_i), so inv·prefix[i] = -J / d_i = x1.
        inv = invert(acc, p) * minus_j % p  # acc != 0: no d is 0 mod p (see map_to_curve_elligator2)
        xs = [b""] * len(ds)
        for i in range(len(ds) - 1, -1, -1):
            x1 = inv * prefix[i] % p
            inv = inv * ds[i] % p
            if legendre(x1 * ((x1 + j) * x1 + 1), p) < 0:  # gx1 is not a square: take x2 = -x1 - J
                x1 = (minus_j - x1) % p
            xs[i] = x1.to_bytes(U_BYTES, "little")
        out += xs
    return out


def make_dst(job_tag: str) -> bytes:
    """The domain separation tag for one PSI job: ``DST_PREFIX + b"|job=" + UTF-8(job_tag)``.

    Every party of a job must use the same tag (the job ID is the natural one); a different tag
    gives unrelated points, so IDs from two jobs can never be matched against each other. Tags
    longer than 255 bytes in total are legal and are reduced by expand_message_xmd (§5.3.3).
    """
    if not isinstance(job_tag, str):
        raise TypeError(f"job_tag must be str, not {type(job_tag).__name__}")
    if not job_tag:
        raise ValueError("job_tag must not be empty: it is what separates one PSI job from another")
    return DST_PREFIX + b"|job=" + job_tag.encode("utf-8")
