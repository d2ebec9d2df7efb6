"""The passive party's public Python SDK, on which the ``vfl-client`` daemon is built.

A passive party holds features, not labels. It dials the active party's server over mutual
TLS, joins the job, and trains its own bottom model; its raw features and weights never leave
the process. See ``PassiveParty`` for a complete example; ``ClientSettings`` are its settings,
as a party's config file sets them. ``InferenceClient`` queries a trained
model on the server's inference endpoint. ``JobClient`` submits, follows and cancels jobs on a
long-running ``vfl-server`` (an operator's certificate), the SDK under ``vfl-jobs``.

Every error the SDK raises on purpose is a ``VflError``; the exported subclasses and the gRPC
statuses they stand for are drawn in ``vflcore.errors``.
"""

import importlib as _importlib
import typing as _typing

from vflclient._jobs import Job, JobClient, JobEvent
from vflcore.errors import (
    ConfigError,
    DataError,
    DuplicateJob,
    JobAborted,
    JobNotFound,
    JobStateError,
    JoinRejected,
    ModelNotFound,
    Overloaded,
    PermissionDenied,
    ServerUnavailable,
    TensorRejected,
    VflError,
)
from vflcore.job.spec import JobSpec
from vflcore.party_privacy import PartyPrivacy
from vflcore.security.tls import TlsFiles

#: The names whose modules bring torch, pandas or pyarrow, each imported when it is first used
#: (PEP 562). An operator's ``vfl-jobs`` and a script that only submits and watches jobs need none
#: of them: importing all of them here made every ``vfl-jobs`` call take 2.7 s before it did anything.
_IMPORTED_WHEN_USED = {
    "ClientSettings": "vflcore.runtime.config",
    "Connection": "vflclient._connection",
    "InferenceClient": "vflclient._inference",
    "ModelFactory": "vflalgorithms.contexts",
    "PartyTable": "vflcore.data.tables",
    "PassiveParty": "vflclient._passive_party",
    "RunResult": "vflclient._passive_party",
    "read_party_csv": "vflcore.data.tables",
}

if _typing.TYPE_CHECKING:
    from vflalgorithms.contexts import ModelFactory
    from vflclient._connection import Connection
    from vflclient._inference import InferenceClient
    from vflclient._passive_party import PassiveParty, RunResult
    from vflcore.data.tables import PartyTable, read_party_csv
    from vflcore.runtime.config import ClientSettings


def __getattr__(name: str) -> _typing.Any:
    module = _IMPORTED_WHEN_USED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # the next use finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_IMPORTED_WHEN_USED))


__all__ = [
    "ClientSettings",
    "ConfigError",
    "Connection",
    "DataError",
    "DuplicateJob",
    "InferenceClient",
    "Job",
    "JobAborted",
    "JobClient",
    "JobEvent",
    "JobNotFound",
    "JobSpec",
    "JobStateError",
    "JoinRejected",
    "ModelFactory",
    "ModelNotFound",
    "Overloaded",
    "PartyPrivacy",
    "PartyTable",
    "PassiveParty",
    "PermissionDenied",
    "RunResult",
    "ServerUnavailable",
    "TensorRejected",
    "TlsFiles",
    "VflError",
    "read_party_csv",
]
