"""Every RPC of a service, read from the proto descriptors, callable with any request: for attack tests.

The negative tests and the fuzz campaign must reach every federation and Control RPC, including
ones added later, so they take the list from ``federation.proto`` itself rather than from a
hand-kept table. ``Rpc.call`` sends one request (a client stream of ``requests``) on a raw
channel and reads the whole answer, so a status raised mid-stream is seen too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message

from vflcore.proto import federation_pb2 as pb
from vflcore.proto import open_inference_pb2 as oip_pb
from vflcore.wire.oip import SERVICE


@dataclass(frozen=True)
class Rpc:
    """One method of a gRPC service: its path, message classes and streaming shape."""

    service: str
    name: str
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"

    def __str__(self) -> str:
        return f"{self.service.rsplit('.', 1)[-1]}.{self.name}"

    def call(self, channel: grpc.Channel, requests: Iterable[Message], *, timeout: float) -> list[Message]:
        """Send ``requests`` (one, unless the RPC streams them) and return every response message."""
        serialize, parse = self.request.SerializeToString, self.response.FromString
        if self.client_streaming:
            stream = channel.stream_stream if self.server_streaming else channel.stream_unary
            answer: Any = stream(self.path, request_serializer=serialize, response_deserializer=parse)(
                iter(list(requests)), timeout=timeout
            )
        else:
            [request] = list(requests)
            unary = channel.unary_stream if self.server_streaming else channel.unary_unary
            answer = unary(self.path, request_serializer=serialize, response_deserializer=parse)(
                request, timeout=timeout
            )
        return list(answer) if self.server_streaming else [answer]


def service_rpcs(service: str, file: Any = pb.DESCRIPTOR, *, wire_name: str | None = None) -> list[Rpc]:
    """The RPCs of ``service`` in a proto ``file`` (``federation.proto``'s by default), in declared order.

    ``wire_name`` is the service's name on the wire when it differs from the file's (KServe's
    ``inference.GRPCInferenceService``, declared under our own package).
    """
    descriptor = file.services_by_name[service]
    return [
        Rpc(
            service=wire_name or descriptor.full_name,
            name=method.name,
            request=message_factory.GetMessageClass(method.input_type),
            response=message_factory.GetMessageClass(method.output_type),
            client_streaming=method.client_streaming,
            server_streaming=method.server_streaming,
        )
        for method in descriptor.methods
    ]


FEDERATION = service_rpcs("Federation")
CONTROL = service_rpcs("Control")
INFERENCE = service_rpcs("GRPCInferenceService", oip_pb.DESCRIPTOR, wire_name=SERVICE)
