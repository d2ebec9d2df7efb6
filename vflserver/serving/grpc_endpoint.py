"""The gRPC half of the inference endpoint: KServe's ``inference.GRPCInferenceService``.

The servicer is thin: it turns messages into ``vflcore.oip`` types (``vflcore.oip_wire``), asks
the ``InferenceHandler``, and maps failures to status codes in ``_abort``. Handlers are
registered by hand under the wire name ``inference.GRPCInferenceService`` rather than through
generated stubs, because our proto package is ``vfl.oip.v2`` (so that our messages and
tritonclient's can live in one process); stock clients therefore reach it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import grpc

from vflcore import oip_wire
from vflcore.oip import SERVICE
from vflcore.proto import open_inference_pb2 as pb
from vflserver.serving.handler import Failure, InferenceHandler, failure

_STATUS = {
    Failure.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    Failure.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Failure.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Failure.INTERNAL: grpc.StatusCode.INTERNAL,
}


class InferenceServicer:
    """The six RPCs of GRPCInferenceService over one handler (and so one model registry)."""

    def __init__(self, handler: InferenceHandler) -> None:
        self.handler = handler

    def server_live(self, request: pb.ServerLiveRequest, context: grpc.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.handler.live())

    def server_ready(self, request: pb.ServerReadyRequest, context: grpc.ServicerContext) -> pb.ServerReadyResponse:
        try:
            return pb.ServerReadyResponse(ready=self.handler.ready())
        except Exception as exc:
            _abort(context, exc, "ServerReady")

    def model_ready(self, request: pb.ModelReadyRequest, context: grpc.ServicerContext) -> pb.ModelReadyResponse:
        try:
            return pb.ModelReadyResponse(ready=self.handler.model_ready(request.name, request.version))
        except Exception as exc:
            _abort(context, exc, "ModelReady")

    def server_metadata(
        self, request: pb.ServerMetadataRequest, context: grpc.ServicerContext
    ) -> pb.ServerMetadataResponse:
        return oip_wire.server_metadata_to_proto(self.handler.metadata)

    def model_metadata(
        self, request: pb.ModelMetadataRequest, context: grpc.ServicerContext
    ) -> pb.ModelMetadataResponse:
        try:
            return oip_wire.model_metadata_to_proto(self.handler.model_metadata(request.name, request.version))
        except Exception as exc:
            _abort(context, exc, "ModelMetadata")

    def model_infer(self, request: pb.ModelInferRequest, context: grpc.ServicerContext) -> pb.ModelInferResponse:
        try:
            answer = self.handler.infer(oip_wire.infer_request_from_proto(request))
            return oip_wire.infer_response_to_proto(answer)
        except Exception as exc:
            _abort(context, exc, "ModelInfer")


def add_inference_service(server: grpc.Server, handler: InferenceHandler) -> None:
    """Serve GRPCInferenceService on ``server`` under its KServe wire name."""
    servicer = InferenceServicer(handler)
    methods: dict[str, tuple[Callable[[Any, grpc.ServicerContext], Any], Any, Any]] = {
        "ServerLive": (servicer.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
        "ServerReady": (servicer.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
        "ModelReady": (servicer.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
        "ServerMetadata": (servicer.server_metadata, pb.ServerMetadataRequest, pb.ServerMetadataResponse),
        "ModelMetadata": (servicer.model_metadata, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
        "ModelInfer": (servicer.model_infer, pb.ModelInferRequest, pb.ModelInferResponse),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
        for name, (behaviour, request_type, response_type) in methods.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


def _abort(context: grpc.ServicerContext, exc: Exception, call: str) -> NoReturn:
    kind, message = failure(exc, call=call)
    context.abort(_STATUS[kind], message)
    raise AssertionError("context.abort returned")  # it always raises
