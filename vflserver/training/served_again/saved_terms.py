"""A federated model served again after a server crash, rebuilt from the active party's disk.

A federated model (SplitNN, VIM, AdptVFedConv) is kept served after its job, until the next job
starts (``ModelServing.serve``). A server that crashes loses it from memory but not from disk: the
active party's saved alignment (``psi/``) and its checkpoint at the end of training. What ties
them together is written here when the model is first served (``served_model.json``: the
alignment's key, the checkpoint's position and each passive party's ID-set digest; digests and
a key, no ID). At the next start the server reads it back, loads the alignment and the
checkpoint, and offers the model's job to the passive parties, which load their parts through
the same path as a passive daemon that restarted (``readmission``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflcore.data.tables import ids_digest
from vflcore.errors import VflError
from vflcore.job.schedule import Position
from vflcore.psi.cache import cache_path, load_alignment
from vflserver.training.served_again.terms import RejoinTerms

#: In the active party's run folder, beside its checkpoints.
SERVED_FILE = "served_model.json"


class NotServableAgain(VflError):
    """The model cannot be served again after a restart; the message says what is missing."""


@dataclass(frozen=True)
class SavedServing:
    """What the served model needs back: its rejoin terms, the passive parties' digests, the aligned IDs."""

    terms: RejoinTerms
    id_set_digests: dict[int, bytes]
    aligned_ids: np.ndarray


def write_served(run_dir: Path, terms: RejoinTerms, id_set_digests: Mapping[int, bytes]) -> None:
    """Record, atomically, what serving the model again after a crash needs (``read_served``)."""
    document = {
        "alignment_key": terms.alignment_key.hex(),
        "position": [terms.position.epoch, terms.position.batch],
        "id_set_digests": {str(party): digest.hex() for party, digest in id_set_digests.items()},
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".served-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(document, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, run_dir / SERVED_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_served(run_dir: Path, own_ids: np.ndarray) -> SavedServing:
    """The saved serving terms and the aligned IDs; NotServableAgain naming what is missing."""
    path = run_dir / SERVED_FILE
    try:
        document = json.loads(path.read_text())
        key = bytes.fromhex(document["alignment_key"])
        epoch, batch = document["position"]
        digests = {int(party): bytes.fromhex(digest) for party, digest in document["id_set_digests"].items()}
    except FileNotFoundError:
        raise NotServableAgain(
            f"{path} is missing (the model was served by a version that did not write it); submit the job again"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotServableAgain(f"{path} is unreadable ({exc}); submit the job again") from None
    aligned = load_alignment(run_dir / "psi", key, ids_digest(own_ids))
    if aligned is None:
        raise NotServableAgain(
            f"the saved alignment {cache_path(run_dir / 'psi', key)} is missing, or the active party's data "
            "file changed since training; submit the job again"
        )
    return SavedServing(RejoinTerms(key, Position(int(epoch), int(batch))), digests, aligned)
