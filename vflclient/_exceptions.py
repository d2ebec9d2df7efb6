"""The errors the SDK raises, and the one place gRPC failures are translated into them.

    VflError                      (vflcore.errors)
    ├── ServerUnavailable         the server cannot be reached or went away       UNAVAILABLE, DEADLINE_EXCEEDED
    ├── PermissionDenied          the certificate does not match what was asked   PERMISSION_DENIED, UNAUTHENTICATED
    ├── JoinRejected              the job will not take this party                FAILED_PRECONDITION
    ├── TensorRejected            the server refused a tensor this party sent     INVALID_ARGUMENT
    ├── JobAborted                the job stopped                                 ABORTED, CANCELLED
    ├── NotBuiltYet               the server does not implement the call          UNIMPLEMENTED
    └── ModelNotFound             the inference endpoint serves no such model     NOT_FOUND

Everything else from gRPC surfaces as ``VflError`` with the status name in the message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from vflcore.errors import JobAborted, JoinRejected, NotBuiltYet, PermissionDenied, VflError


class ServerUnavailable(VflError):
    """The active party's server cannot be reached, or stopped answering."""


class TensorRejected(VflError):
    """The server refused a tensor this party sent (shape, dtype or values)."""


class ModelNotFound(VflError):
    """The inference endpoint serves no model of that name or version."""


_BY_STATUS: dict[grpc.StatusCode, type[VflError]] = {
    grpc.StatusCode.UNAVAILABLE: ServerUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: ServerUnavailable,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: JoinRejected,
    grpc.StatusCode.INVALID_ARGUMENT: TensorRejected,
    grpc.StatusCode.ABORTED: JobAborted,
    grpc.StatusCode.CANCELLED: JobAborted,
    grpc.StatusCode.UNIMPLEMENTED: NotBuiltYet,
    grpc.StatusCode.NOT_FOUND: ModelNotFound,
}


@contextmanager
def translated(rpc: str) -> Iterator[None]:
    """Re-raise a ``grpc.RpcError`` from ``rpc`` as the most specific SDK error."""
    try:
        yield
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        kind = _BY_STATUS.get(code, VflError)
        raise kind(f"{rpc}: {details} ({code.name})") from exc
