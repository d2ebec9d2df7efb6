"""The one place gRPC failures are translated into the SDK's errors.

The classes live in ``vflcore.errors`` (where the whole tree is drawn); this module only says
which status becomes which:

    UNAVAILABLE, DEADLINE_EXCEEDED        ServerUnavailable
    PERMISSION_DENIED, UNAUTHENTICATED    PermissionDenied
    FAILED_PRECONDITION                   JoinRejected
    INVALID_ARGUMENT                      TensorRejected
    ABORTED, CANCELLED                    JobAborted
    NOT_FOUND                             ModelNotFound

Everything else from gRPC (UNIMPLEMENTED, INTERNAL, ...) surfaces as ``VflError`` with the status
name in the message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from vflcore.errors import (
    JobAborted,
    JoinRejected,
    ModelNotFound,
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
