"""The names tensors travel under that every party and algorithm shares, and which RPC carries each.

A tensor key is (job, round, batch, name). Names an algorithm alone uses live in its own
``vflalgorithms/<name>/spec.py``; the ones here are the protocol's own: the training exchange,
evaluation and inference, PSI, and the two name families that have RPCs of their own
(PushADMMState for ADMM state, FetchHead for a party's head). The transport picks the RPC from
the name through ``upload_rpc`` and ``download_rpc``, so no caller tells it which call to use.
"""

from __future__ import annotations

from collections.abc import Iterable

# Both halves build keys through these, so a renamed exchange cannot drift apart between them.
EMBEDDING = "embedding"
GRADIENT = "gradient"
EVAL_EMBEDDING = "eval/embedding"

#: Names under this prefix are ADMM state (004 §3.2), pushed to a party on PushADMMState.
ADMM_STATE_PREFIX = "admm/"
#: A party's own linear head W_k, (outputs, embedding_dim) float32, uploaded on FetchHead.
HEAD = "head"

# PSI exchanges (docs/explanation/psi.md), all in round 0. The chunked ones use the chunk's number as batch;
# the others batch 0.
PSI_CLIENT_BLINDED = "psi/client-blinded"  # passive -> active: p·H(x) of one chunk, (c, 32) uint8
PSI_CLIENT_TAKEN = "psi/client-taken"  # active -> passive: it took that chunk (flow control), (0,) uint8
PSI_SERVER_BLINDED = "psi/server-blinded"  # active -> passive: a·H(y) of one chunk, (c, 32) uint8
PSI_SERVER_DOUBLE_BLINDED = "psi/server-double-blinded"  # passive -> active: p·a·H(y) of one chunk, (c, 12) uint8
PSI_MEMBERS = "psi/members"  # active -> passive: upload positions in the intersection, int64
PSI_ALIGNED_DIGEST = "psi/aligned-digest"  # passive -> active: SHA-256 of the aligned IDs, (32,) uint8


def infer_embedding_name(request_id: str) -> str:
    """Name of the representation a party sends for one inference request."""
    return f"infer/{request_id}/embedding"


def is_admm_name(name: str) -> bool:
    """ADMM state travels on PushADMMState, and nothing else does."""
    return name.startswith(ADMM_STATE_PREFIX)


def is_psi_name(name: str) -> bool:
    """PSI tensors travel on the PSI calls only, training tensors never do."""
    return name.startswith("psi/")


def upload_rpc(name: str) -> str:
    """The call a passive party uploads a tensor named ``name`` on."""
    if is_psi_name(name):
        return "PsiUpload"
    return "FetchHead" if name == HEAD else "SendEmbeddings"


def download_rpc(names: Iterable[str]) -> str:
    """The call a passive party downloads tensors named ``names`` on; they must share one."""
    calls = {
        "PsiDownload" if is_psi_name(n) else "PushADMMState" if is_admm_name(n) else "ReturnGradients" for n in names
    }
    if len(calls) != 1:
        raise ValueError(f"tensors {sorted(names)} travel on different calls ({sorted(calls)}); download them apart")
    return calls.pop()
