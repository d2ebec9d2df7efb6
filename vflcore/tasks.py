"""Work the active party hands a passive party, as plain dataclasses.

The server pushes these down each party's Subscribe stream; the party answers with its own
calls. ``vflcore.wire`` converts them to and from protobuf, nothing else sees the proto types.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Align:
    """Align sample IDs: run PSI, or reuse the alignment saved under ``alignment_key``."""

    task_id: int
    alignment_key: bytes
    run_psi: bool


@dataclass(frozen=True)
class TrainEpoch:
    """Run one epoch of the job's algorithm over the shared batch schedule."""

    task_id: int
    epoch: int


@dataclass(frozen=True)
class Evaluate:
    """Send representations of these aligned rows for the end-of-epoch evaluation."""

    task_id: int
    epoch: int
    rows: np.ndarray


@dataclass(frozen=True)
class Infer:
    """Send representations of these aligned rows for an inference request."""

    task_id: int
    request_id: str
    rows: np.ndarray


@dataclass(frozen=True)
class Finish:
    """The job is over (or aborted); the party leaves (its checkpoints were written per epoch)."""

    task_id: int
    success: bool
    message: str


@dataclass(frozen=True)
class ShareHead:
    """Upload this party's linear head W_k by FetchHead (VIMADMM-J, for client importance)."""

    task_id: int
    round: int


Task = Align | TrainEpoch | Evaluate | Infer | ShareHead | Finish


# The names of the tensors each task exchanges. Both halves build keys through these functions,
# so a renamed exchange cannot drift apart between server and client.
EMBEDDING = "embedding"
GRADIENT = "gradient"
EVAL_EMBEDDING = "eval/embedding"
# Asynchronous VFL: every training row's embedding, once, before the first epoch (002 §5.4.2).
WARMUP_EMBEDDING = "warmup/embedding"


# APFed (000 §3): the active party's h^A = f_A(x^A_B) goes down to every passive party (on
# ReturnGradients); each answers with ∂L_p/∂h^A (on SendEmbeddings). Both are (rows, embedding_dim).
ACTIVE_EMBEDDING = "apfed/active-embedding"
PASSIVE_GRADIENT = "apfed/passive-gradient"


# VIMADMM (004 §3.2): what the server pushes to client k per batch, on PushADMMState.
ADMM_DUAL = "admm/dual"  # λ_B, (rows, outputs) float32
ADMM_RESIDUAL = "admm/residual"  # s^k_B, (rows, outputs) float32
ADMM_HEAD = "admm/head"  # W_k, (outputs, embedding_dim) float32


def is_admm_name(name: str) -> bool:
    return name.startswith("admm/")


# VIMADMM-J: a party's own head W_k, (outputs, embedding_dim) float32, on FetchHead.
HEAD = "head"


def infer_embedding_name(request_id: str) -> str:
    """Name of the representation a party sends for one inference request."""
    return f"infer/{request_id}/embedding"


# PSI exchanges (docs/psi.md), all with round 0 and batch 0.
PSI_CLIENT_BLINDED = "psi/client-blinded"  # passive -> active: p·H(x), (n, 32) uint8
PSI_SERVER_BLINDED = "psi/server-blinded"  # active -> passive: a·H(y), (m, 32) uint8
PSI_SERVER_DOUBLE_BLINDED = "psi/server-double-blinded"  # passive -> active: p·a·H(y), (m, 12) uint8
PSI_MEMBERS = "psi/members"  # active -> passive: upload positions in the intersection, int64
PSI_ALIGNED_DIGEST = "psi/aligned-digest"  # passive -> active: SHA-256 of the aligned IDs, (32,) uint8


def is_psi_name(name: str) -> bool:
    """PSI tensors travel on the PSI calls only, training tensors never do."""
    return name.startswith("psi/")


# AdptVFedConv (003 §3.2): W_e^1's tensors go down once (names EXTRACTOR_PREFIX + parameter name,
# on ReturnGradients); each passive party's feature maps H^k of every aligned row come up once
# (on SendEmbeddings, chunked like any tensor). Both with round 0 and batch 0.
FEATURE_MAPS = "adptvfedconv/feature-maps"
