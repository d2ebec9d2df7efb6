"""The one place gRPC failures are translated into the SDK's errors.

The classes live in ``vflcore.errors`` (where the whole tree is drawn), and the servers' way
there, class to status, is ``vflcore.status``; this module only says which status becomes which:

    UNAVAILABLE, DEADLINE_EXCEEDED        ServerUnavailable
    PERMISSION_DENIED, UNAUTHENTICATED    PermissionDenied
    FAILED_PRECONDITION                   JoinRejected
    INVALID_ARGUMENT                      TensorRejected
    ABORTED, CANCELLED                    JobAborted
    RESOURCE_EXHAUSTED                    Overloaded
    NOT_FOUND                             ModelNotFound

The Control API (``JobClient``) reuses four statuses for the job store, so its calls pass
``CONTROL`` to ``translated``, which overrides these lines:

    NOT_FOUND                             JobNotFound
    ALREADY_EXISTS                        DuplicateJob
    FAILED_PRECONDITION                   JobStateError
    INVALID_ARGUMENT                      ConfigError     (the job document is wrong)

Everything else from gRPC (UNIMPLEMENTED, INTERNAL, ...) surfaces as ``VflError`` with the status
name in the message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import grpc

from vflcore.errors import (
    ConfigError,
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

_BY_STATUS: dict[grpc.StatusCode, type[VflError]] = {
    grpc.StatusCode.UNAVAILABLE: ServerUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: ServerUnavailable,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: JoinRejected,
    grpc.StatusCode.INVALID_ARGUMENT: TensorRejected,
    grpc.StatusCode.ABORTED: JobAborted,
    grpc.StatusCode.CANCELLED: JobAborted,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Overloaded,
    grpc.StatusCode.NOT_FOUND: ModelNotFound,
}

#: What the Control API's statuses mean, on top of ``_BY_STATUS``.
CONTROL: Mapping[grpc.StatusCode, type[VflError]] = {
    grpc.StatusCode.NOT_FOUND: JobNotFound,
    grpc.StatusCode.ALREADY_EXISTS: DuplicateJob,
    grpc.StatusCode.FAILED_PRECONDITION: JobStateError,
    grpc.StatusCode.INVALID_ARGUMENT: ConfigError,
}


@contextmanager
def translated(rpc: str, overrides: Mapping[grpc.StatusCode, type[VflError]] | None = None) -> Iterator[None]:
    """Re-raise a ``grpc.RpcError`` from ``rpc`` as the most specific SDK error.

    ``overrides`` (e.g. ``CONTROL``) wins over the default table for the statuses it names.
    """
    try:
        yield
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        kind = (overrides or {}).get(code) or _BY_STATUS.get(code, VflError)
        raise kind(f"{rpc}: {details} ({code.name})") from exc
