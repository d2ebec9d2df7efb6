"""The passive party's public Python SDK, on which the ``vfl-client`` daemon is built.

A passive party holds features, not labels. It dials the active party's server over mutual
TLS, joins the job, and trains its own bottom model; its raw features and weights never leave
the process. See ``PassiveParty`` for a complete example. ``InferenceClient`` queries a trained
model on the server's inference endpoint.
"""

from vflclient._exceptions import ModelNotFound, ServerUnavailable, TensorRejected
from vflclient.algorithms import ModelFactory
from vflclient.connection import Connection
from vflclient.inference import InferenceClient
from vflclient.passive_party import PassiveParty, RunResult
from vflcore.data import DataError, PartyTable, read_party_csv
from vflcore.errors import JobAborted, JoinRejected, NotBuiltYet, PermissionDenied, VflError
from vflcore.job import JobSpec
from vflcore.tls import TlsFiles

__all__ = [
    "Connection",
    "DataError",
    "InferenceClient",
    "JobAborted",
    "JobSpec",
    "JoinRejected",
    "ModelFactory",
    "ModelNotFound",
    "NotBuiltYet",
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
