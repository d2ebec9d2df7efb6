"""X25519 eight points at a time, through Intel's multi-buffer library, with the bytes of OpenSSL's.

Why: PSI costs two X25519 per ID per party, and one X25519 at a time through ``cryptography``
(OpenSSL) took 24.0 µs on this project's 2-core machine. Intel's ``mbx_x25519_mb8`` (the
``crypto_mb`` part of the Intel Cryptography Primitives Library, Apache-2.0) computes eight
independent X25519 in the lanes of AVX-512 IFMA registers: 4.2 µs each there, ctypes included
(issue 37). SecretFlow's ECDH-PSI uses the same function on such CPUs.

The library comes from PyPI, not from this repository: the ``ipp-crypto`` wheel installs
``libcrypto_mb.so`` under the environment's ``lib/``, and it needs ``libsvml.so``, ``libimf.so``,
``libirng.so`` and ``libintlc.so.5`` from the ``intel-cmplr-lib-rt`` wheel (installed beside it)
and the system's OpenSSL 3 (``libcrypto.so.3``). They are loaded with ctypes: there is no Python
binding, and a compiled extension of our own would need a compiler on every party's host.

Same bytes as OpenSSL, on every input (``tests/unit/vflcore/psi/test_x25519_multibuffer.py``):
- the u-coordinate's top bit is cleared first, as RFC 7748 asks of every X25519 (both do it;
  done here too so that nothing depends on the library doing it);
- a non-canonical u (p to 2^255 - 1) is reduced mod p by the curve arithmetic, in both;
- a low-order point gives the all-zero result. It is looked for before the library runs (for
  u = p - 1 the library did not give zeros), a lane the library flags is redone by OpenSSL, and
  an all-zero output is refused in any case. OpenSSL refuses it (``ValueError``), and so does
  this module (``PsiError``, with the item's place in the batch): for PSI an
  all-zero value would be the same for every low-order point whatever the key, so two parties'
  values would match without a shared ID, and only a malformed or malicious message holds one;
- a batch that is not a multiple of eight is padded with the base point (u = 9), whose results
  are dropped.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vflcore.errors import PsiError

__all__ = ["LANES", "LOW_ORDER_U", "MultiBufferX25519", "Unavailable", "load"]

#: Points per call of ``mbx_x25519_mb8``.
LANES: Final = 8
_U: Final = 32
#: The runtime libraries ``libcrypto_mb.so`` needs, in the order that satisfies their own needs.
_RUNTIME: Final = ("libintlc.so.5", "libimf.so", "libirng.so", "libsvml.so")
_BASE_POINT: Final = (9).to_bytes(_U, "little")
_ZERO: Final = bytes(_U)
_MASK_BIT_255: Final = bytes(b & 0x7F for b in range(256))
_P: Final = 2**255 - 19
#: The u-coordinates (bit 255 clear) whose X25519 product is all zeros for every key: the points of
#: order 1, 2, 4 and 8 on the curve and its twist, canonical and not (libsodium's list).
LOW_ORDER_U: Final = tuple(
    value.to_bytes(_U, "little")
    for value in (
        0,
        1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
        _P - 1,
        _P,
        _P + 1,
    )
)
_LOW_ORDER_WORDS: Final = [np.frombuffer(u, dtype="<u8") for u in LOW_ORDER_U]

_Lanes = ctypes.c_void_p * LANES


@dataclass(frozen=True)
class Unavailable:
    """Why the multi-buffer path cannot run on this host, in words for the start-up log."""

    reason: str


class MultiBufferX25519:
    """``mbx_x25519_mb8`` bound through ctypes; one per process (``load``)."""

    def __init__(self, library: ctypes.CDLL, where: Path) -> None:
        self._mb8 = library.mbx_x25519_mb8
        self._mb8.restype = ctypes.c_uint64
        self._mb8.argtypes = [_Lanes, _Lanes, _Lanes]
        self.where = where

    def exchange_packed(self, secret: bytes, points: bytes) -> bytes:
        """X25519(secret, u) for each 32-byte u in ``points``, concatenated in order.

        Raises ``PsiError`` (``index``: the first such item's place) where OpenSSL would refuse
        the point, and ValueError if ``points`` is not whole 32-byte items.
        """
        if len(secret) != _U:
            raise ValueError(f"an X25519 secret is {_U} bytes, got {len(secret)}")
        count, rest = divmod(len(points), _U)
        if rest:
            raise ValueError(f"points must be whole {_U}-byte u-coordinates; got {len(points)} bytes")
        if not count:
            return b""
        padded = -count % LANES
        source = bytearray(points)
        source += _BASE_POINT * padded
        source[_U - 1 :: _U] = source[_U - 1 :: _U].translate(_MASK_BIT_255)  # RFC 7748, as OpenSSL does
        low = _first_low_order(source, count)
        if low is not None:
            raise _low_order(low)
        data = (ctypes.c_char * len(source)).from_buffer(source)
        result = ctypes.create_string_buffer(len(source))
        key = ctypes.create_string_buffer(secret, _U)
        keys = _Lanes(*[ctypes.addressof(key)] * LANES)
        into, start = ctypes.addressof(result), ctypes.addressof(data)
        step = _U * LANES
        for offset in range(0, len(source), step):
            status = self._mb8(
                _Lanes(*range(into + offset, into + offset + step, _U)),
                keys,
                _Lanes(*range(start + offset, start + offset + step, _U)),
            )
            if status:
                lanes = bytes(source[offset : offset + step])
                ctypes.memmove(into + offset, _one_at_a_time(secret, lanes, offset // _U), step)
        out = result.raw[: count * _U]
        del data  # the buffer export ends before ``source`` may be freed
        _check_nonzero(out)
        return out


def _one_at_a_time(secret: bytes, points: bytes, first: int) -> bytes:
    """OpenSSL's X25519 for the lanes of a call that reported a fault: it names the low-order point.

    The library's status has four bits a lane, and its codes are not a stable interface; what
    matters is that a refused point is refused as OpenSSL refuses it, at the same index, and that
    any other fault still gives OpenSSL's bytes. Only a malformed or malicious batch comes here.
    """
    key = X25519PrivateKey.from_private_bytes(secret)
    out = []
    for lane in range(len(points) // _U):
        try:
            out.append(key.exchange(X25519PublicKey.from_public_bytes(points[lane * _U : (lane + 1) * _U])))
        except ValueError:
            raise _low_order(first + lane) from None
    return b"".join(out)


def _first_low_order(source: bytearray, count: int) -> int | None:
    """The place of the first of ``count`` (masked) u-coordinates that is a low-order point, if any.

    Looked up before the library runs, not read off its output: for u = p - 1 ``mbx_x25519_mb8``
    returned a non-zero value with an OK status where OpenSSL (rightly) gives all zeros and
    refuses, measured with ipp-crypto 2026.2.0. Compared as four 64-bit words a point, vectorised.
    """
    words = np.frombuffer(source, dtype="<u8", count=count * 4).reshape(count, 4)
    hits = np.zeros(count, dtype=bool)
    for point in _LOW_ORDER_WORDS:
        hits |= (words == point).all(axis=1)
    found = np.flatnonzero(hits)
    return int(found[0]) if len(found) else None


def _low_order(index: int) -> PsiError:
    return PsiError(f"point {index} is a low-order point (its product is the neutral element)", index)


def _check_nonzero(out: bytes) -> None:
    index = out.find(_ZERO)
    while index != -1:
        if index % _U == 0:
            raise _low_order(index // _U)
        index = out.find(_ZERO, index + 1)


def _library_dirs() -> Iterator[Path]:
    """Where pip put the wheels' ``lib/`` files: under this environment's prefix, or as their RECORD says."""
    yield Path(sys.prefix) / "lib"
    for name in ("ipp-crypto", "intel-cmplr-lib-rt"):
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        for file in files:
            if file.name in ("libcrypto_mb.so", "libsvml.so"):
                yield Path(str(file.locate())).resolve().parent


@functools.cache
def load() -> MultiBufferX25519 | Unavailable:
    """The multi-buffer X25519 of this host, or why there is none (once per process).

    Unavailable where: the wheels are not installed; a library does not load (no OpenSSL 3,
    another architecture); or the CPU lacks what the library needs (AVX-512 IFMA), which the
    library itself says (``mbx_is_crypto_mb_applicable``).
    """
    if sys.platform != "linux":
        return Unavailable(f"the multi-buffer library is loaded on Linux only, not on {sys.platform}")
    dirs = list(dict.fromkeys(_library_dirs()))
    found = next((d for d in dirs if (d / "libcrypto_mb.so").exists()), None)
    if found is None:
        return Unavailable("the ipp-crypto wheel is not installed (no libcrypto_mb.so); pip install ipp-crypto")
    runtime = next((d for d in dirs if (d / "libsvml.so").exists()), None)
    if runtime is None:
        return Unavailable(
            "the intel-cmplr-lib-rt wheel is not installed (no libsvml.so); pip install intel-cmplr-lib-rt"
        )
    try:
        for name in _RUNTIME:
            ctypes.CDLL(str(runtime / name))  # local: no symbol of theirs (exp, log, ...) reaches others
        library = ctypes.CDLL(str(found / "libcrypto_mb.so"))
    except OSError as exc:
        return Unavailable(f"libcrypto_mb.so does not load: {exc}")
    applicable = library.mbx_is_crypto_mb_applicable
    applicable.restype = ctypes.c_int
    applicable.argtypes = [ctypes.c_uint64]
    if not applicable(0):
        return Unavailable("this CPU lacks AVX-512 IFMA, which mbx_x25519_mb8 needs")
    return MultiBufferX25519(library, found / "libcrypto_mb.so")
