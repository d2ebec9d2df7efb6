"""The passive party's public Python SDK, on which the ``vfl-client`` daemon is built.

A passive party holds features, not labels. It dials the active party's server over mutual
TLS, joins the job, and trains its own bottom model; its raw features and weights never leave
the process. See ``PassiveParty`` for a complete example. ``InferenceClient`` queries a trained
model on the server's inference endpoint. ``JobClient`` submits, follows and cancels jobs on a
long-running ``vfl-server`` (an operator's certificate), the SDK under ``vfl-jobs``.

Every error the SDK raises on purpose is a ``VflError``; the exported subclasses and the gRPC
statuses they stand for are drawn in ``vflcore.errors``.
"""

from vflalgorithms.base import ModelFactory
from vflclient._connection import Connection
from vflclient._inference import InferenceClient
from vflclient._jobs import Job, JobClient, JobEvent
from vflclient._passive_party import PassiveParty, RunResult
from vflcore.data.tables import PartyTable, read_party_csv
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
from vflcore.job import JobSpec
from vflcore.party_privacy import PartyPrivacy
from vflcore.security.tls import TlsFiles

__all__ = [
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
