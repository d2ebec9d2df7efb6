"""Server reflection that describes the inference service under its wire name, ``inference.*``.

Our messages live in package ``vfl.oip.v2`` (see the proto file for why), but clients call
``inference.GRPCInferenceService``. A reflection client such as grpcurl asks for the file that
defines ``inference.GRPCInferenceService``; to answer, reflection gets a private descriptor pool
holding a copy of our file with the package renamed, next to the health and reflection files.
The process's default pool is untouched, so tritonclient's own ``inference`` package can still
be imported alongside.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from vflcore.proto import open_inference_pb2 as pb
from vflcore.wire.oip import SERVICE

_WIRE_PACKAGE = SERVICE.rsplit(".", 1)[0]


def reflection_pool() -> descriptor_pool.DescriptorPool:
    """A pool with the inference file as the wire sees it, plus health and reflection."""
    pool = descriptor_pool.DescriptorPool()
    for file in (health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR):
        pool.AddSerializedFile(file.serialized_pb)
    pool.AddSerializedFile(_renamed(pb.DESCRIPTOR.serialized_pb, _WIRE_PACKAGE).SerializeToString())
    return pool


def _renamed(serialized: bytes, package: str) -> descriptor_pb2.FileDescriptorProto:
    """The file with its package, and every fully qualified type reference, moved to ``package``."""
    file = descriptor_pb2.FileDescriptorProto.FromString(serialized)
    old, new = f".{file.package}.", f".{package}."
    file.package = package
    file.name = f"{package}/{file.name.rsplit('/', 1)[-1]}"

    def fix(name: str) -> str:
        return new + name[len(old) :] if name.startswith(old) else name

    messages = list(file.message_type)
    while messages:
        message = messages.pop()
        messages.extend(message.nested_type)
        for field in message.field:
            if field.type_name:  # scalars have none, and setting "" would still mark it present
                field.type_name = fix(field.type_name)
    for service in file.service:
        for rpc in service.method:
            rpc.input_type, rpc.output_type = fix(rpc.input_type), fix(rpc.output_type)
    return file
