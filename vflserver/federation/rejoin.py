"""What a passive party must still hold to come back into a served federated model after a reconnect.

A federated model is kept served after its job (``ModelServing.serve``). When a passive party's
daemon restarts, its trained part is gone from memory, but not from its disk: the alignment it
trained on and its checkpoint at the end of training. Loading both brings it back exactly as it
was (``vflserver.training.readmission``). This module says, at Join, whether the party can: the
same IDs as in training, the saved alignment, and that checkpoint. Each refusal says why and
what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from vflcore.job import Position


@dataclass(frozen=True)
class RejoinTerms:
    """The served model's needs: the alignment it trained on (by key) and the checkpoint at ``position``."""

    alignment_key: bytes
    position: Position


def rejoin_refusal(
    terms: RejoinTerms,
    job_id: str,
    party: int,
    trained_digest: bytes,
    id_set_digest: bytes,
    cached_alignments: frozenset[bytes],
    held: tuple[Position, ...],
) -> str | None:
    """Why ``party`` cannot come back into the served model of ``job_id``; None if it can."""
    folder = f"runs/{job_id}/party-{party}"
    if id_set_digest != trained_digest:
        return (
            f"party {party}'s IDs differ from those it trained job {job_id!r} with, so the served model cannot "
            "use them; restore its data file, or submit the job again to train on the new data"
        )
    if terms.alignment_key not in cached_alignments:
        return (
            f"party {party} no longer holds the saved alignment of job {job_id!r} ({folder}/psi); submit the job "
            "again to align and train anew"
        )
    if terms.position not in held:
        return (
            f"party {party} holds no readable checkpoint of job {job_id!r} at {terms.position} ({folder}), the "
            "trained part the served model needs; submit the job again to train anew"
        )
    return None
