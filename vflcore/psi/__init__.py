"""Cryptographic core of ECDH private set intersection (PSI) over Curve25519, and its chunked bookkeeping.

Each party hashes its sample IDs to curve points (``hash_to_curve``: RFC 9380 Elligator 2, never a
raw hash) and blinds them with a per-job secret X25519 scalar (``blinding``). Blinding the peer's
blinded points a second time gives values that match exactly for the shared IDs (``matching``).
The exchange moves in chunks (``chunks``), in each party's secret order (``order``), computed
ahead of the network (``pipeline``); what a restart keeps is in ``progress``, and the aligned
order follows from the matches (``intersection``). The messages and parties around these live
in the service (``vflclient._alignment``, ``vflserver.federation.psi_exchange``), not here.

    dst = make_dst(job_id)
    key = BlindingKey.generate()
    with ParallelBlinder(key) as pool:
        mine = pool.hash_and_blind(ids, dst)      # send to the peer
        theirs2 = pool.blind(theirs)              # the peer's values, blinded by us too
"""

from vflcore.psi.blinding import (
    BlindingKey,
    ParallelBlinder,
    PsiError,
    blind,
    hash_and_blind,
)
from vflcore.psi.hash_to_curve import encode_many, encode_to_u, make_dst

__all__ = [
    "BlindingKey",
    "ParallelBlinder",
    "PsiError",
    "blind",
    "encode_many",
    "encode_to_u",
    "hash_and_blind",
    "make_dst",
]
