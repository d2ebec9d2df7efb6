"""The one table from errors to statuses: which gRPC status a server answers when a handler raises.

Every server surface reads it: the Federation servicer, the Control API and the inference
endpoint (whose REST half turns the gRPC status into an HTTP one through ``HTTP_STATUS``, also
here). An error class that is not in ``STATUS`` (nor has an ancestor there) is the server's own
fault: INTERNAL, logged. The tree in ``vflcore.errors`` draws the same column beside each class;
``tests/unit/vflcore/test_errors.py`` keeps the two in step. The SDK's way back, status to class, is
``vflclient._exceptions``.

It lives in ``vflcore`` beside the exception tree, on the floor every server module may import.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from types import MappingProxyType

import grpc

from vflcore.errors import (
    ConfigError,
    DuplicateJob,
    InferenceInputError,
    JobAborted,
    JobNotFound,
    JobStateError,
    JoinRejected,
    ModelNotFound,
    Overloaded,
    PartyUnavailable,
    PermissionDenied,
    ProtocolError,
    TensorError,
)

#: Error class -> status. A subclass not listed takes its nearest listed ancestor's status
#: (EmptyIntersection is a JobAborted: ABORTED; PartyLost a PartyUnavailable: UNAVAILABLE).
STATUS: Mapping[type[BaseException], grpc.StatusCode] = MappingProxyType(
    {
        # the federation: what a passive party's call can run into
        PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
        JoinRejected: grpc.StatusCode.FAILED_PRECONDITION,
        PartyUnavailable: grpc.StatusCode.UNAVAILABLE,
        Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
        JobAborted: grpc.StatusCode.ABORTED,
        TensorError: grpc.StatusCode.INVALID_ARGUMENT,
        # inference
        InferenceInputError: grpc.StatusCode.INVALID_ARGUMENT,
        ProtocolError: grpc.StatusCode.INVALID_ARGUMENT,
        ModelNotFound: grpc.StatusCode.NOT_FOUND,
        # the Control API: the job store and the job document
        JobNotFound: grpc.StatusCode.NOT_FOUND,
        DuplicateJob: grpc.StatusCode.ALREADY_EXISTS,
        JobStateError: grpc.StatusCode.FAILED_PRECONDITION,
        ConfigError: grpc.StatusCode.INVALID_ARGUMENT,
        # the one builtin: a wait that ran out (a step's tensor that never came)
        TimeoutError: grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)

#: gRPC status -> HTTP status, for the REST inference endpoint (the pairs of google.rpc.Code).
HTTP_STATUS: Mapping[grpc.StatusCode, HTTPStatus] = MappingProxyType(
    {
        grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
        grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.BAD_REQUEST,
        grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
        grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS: HTTPStatus.CONFLICT,
        grpc.StatusCode.ABORTED: HTTPStatus.CONFLICT,
        grpc.StatusCode.RESOURCE_EXHAUSTED: HTTPStatus.TOO_MANY_REQUESTS,
        grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
        grpc.StatusCode.INTERNAL: HTTPStatus.INTERNAL_SERVER_ERROR,
    }
)


def status_for(exc: BaseException) -> grpc.StatusCode | None:
    """The status ``exc`` becomes: its class's, or its nearest listed ancestor's; None for a server fault."""
    for kind in type(exc).__mro__:
        code = STATUS.get(kind)
        if code is not None:
            return code
    return None


def http_status(code: grpc.StatusCode) -> HTTPStatus:
    """The HTTP status that stands for gRPC status ``code`` (500 for one with no pair here)."""
    return HTTP_STATUS.get(code, HTTPStatus.INTERNAL_SERVER_ERROR)
