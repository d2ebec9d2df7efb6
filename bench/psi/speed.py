"""This box's X25519 speed, measured in the same run as the PSI.

ECDH-PSI costs each party one hash-to-curve and two X25519 multiplications per ID, so these
per-operation figures let the PSI seconds be scaled to another machine and give the floor the
report compares the run against.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Speed:
    openssl_us: float | None  # wall µs per op from `openssl speed` (single thread)
    crypto_wall_us: float  # cryptography load+exchange, as our blinder calls it: wall
    crypto_cpu_us: float  # same, process CPU time (insensitive to other load on the box)
    hash_cpu_us: float  # encode_many (Elligator 2) per ID, CPU
    note: str = ""
    #: X25519 per op, CPU, through the path the daemons take (``[psi] x25519 = "auto"``): 0 if not measured
    blind_cpu_us: float = 0.0
    blind_path: str = "openssl"

    @property
    def floor_x25519_us(self) -> float:
        """The X25519 cost the floor uses: the daemons' own path where measured, else OpenSSL's."""
        return self.blind_cpu_us or self.crypto_cpu_us


def x25519_speed() -> Speed:
    """``openssl speed`` (the library's best case) and the exact calls the blinder makes, per op.

    CPU time is measured next to wall time because the box is shared: CPU per op is what other load
    moves least.
    """
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    from vflcore.psi import encode_many, make_dst

    openssl_us, note = None, ""
    exe = shutil.which("openssl")
    if exe is None:
        note = "openssl not on PATH"
    else:
        try:
            out = subprocess.run(
                [exe, "speed", "-seconds", "2", "ecdhx25519"], capture_output=True, text=True, timeout=60
            ).stdout
            match = re.search(r"ecdh \(X25519\)\s+\S+s\s+([\d.]+)", out)
            if match:
                openssl_us = 1e6 / float(match.group(1))
            else:
                note = "could not parse `openssl speed` output"
        except (OSError, subprocess.TimeoutExpired) as exc:
            note = f"openssl speed failed: {exc}"
    n = 2000
    dst = make_dst("bench-psi-speed")
    ids = [f"user-{i:07d}".encode() for i in range(n)]
    c0, w0 = time.process_time(), time.perf_counter()
    points = encode_many(ids, dst)
    hash_cpu = (time.process_time() - c0) / n
    key = X25519PrivateKey.generate()
    load = X25519PublicKey.from_public_bytes
    walls, cpus = [], []
    for _ in range(3):
        c0, w0 = time.process_time(), time.perf_counter()
        for u in points:
            key.exchange(load(u))
        walls.append((time.perf_counter() - w0) / n)
        cpus.append((time.process_time() - c0) / n)
    blind_cpu, path = _daemons_x25519(points)
    return Speed(
        openssl_us,
        statistics.median(walls) * 1e6,
        statistics.median(cpus) * 1e6,
        hash_cpu * 1e6,
        note,
        blind_cpu_us=blind_cpu * 1e6,
        blind_path=path,
    )


def _daemons_x25519(points: list[bytes]) -> tuple[float, str]:
    """CPU seconds per X25519 through the blinder's path for ``[psi] x25519 = "auto"``, and its name.

    The multi-buffer path (eight points a call) is the floor's X25519 where the daemons take it
    (issue 37): measuring OpenSSL's there would put the floor above what the run can do.
    """
    from vflcore.psi.blinding import BlindingKey, blind_with_key
    from vflcore.psi.x25519 import choose

    key, batch = BlindingKey.generate(), points * 8  # 16,000 points: whole calls of eight
    cpus = []
    for _ in range(3):
        c0 = time.process_time()
        blind_with_key(key._private, batch, 0, "auto")
        cpus.append((time.process_time() - c0) / len(batch))
    return statistics.median(cpus), choose("auto").name
