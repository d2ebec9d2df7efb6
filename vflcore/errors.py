"""Domain errors shared by both daemons, each tied to the gRPC status it becomes on the wire.

    VflError
    ├── ConfigError            a config file or flag is wrong            (never on the wire)
    ├── PermissionDenied       certificate and claim disagree, or the    PERMISSION_DENIED
    │                          certified party is not part of the job
    ├── JoinRejected           the party's data does not fit this job,   FAILED_PRECONDITION
    │                          or it joined after training started
    ├── PartyUnavailable       a party is offline or stopped answering   UNAVAILABLE
    ├── JobAborted             the job stopped (failure or shutdown)     ABORTED
    └── NotBuiltYet            an RPC whose algorithm has not landed     UNIMPLEMENTED

``vflcore.wire.tensors.TensorError`` (a ValueError) becomes INVALID_ARGUMENT. The mapping to status
codes lives in one place, ``vflserver.servicer``; the client SDK maps back in ``vflclient``.
"""

from __future__ import annotations


class VflError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(VflError):
    """A config file, flag or data file is wrong; the message names it and says what to do."""


class PermissionDenied(VflError):
    """The caller's certificate does not allow what it asked for."""


class JoinRejected(VflError):
    """A party's join does not fit the job (a different ID set, or training already started)."""


class PartyUnavailable(VflError):
    """A party needed for this step is offline, or did not answer in time."""

    def __init__(self, party: int, reason: str) -> None:
        super().__init__(f"party {party} is unavailable: {reason}")
        self.party = party


class JobAborted(VflError):
    """The job stopped before this call could complete."""


class NotBuiltYet(VflError):
    """The RPC exists in the protocol but no algorithm in this release uses it."""
