"""The gRPC half of the inference endpoint: KServe's ``inference.GRPCInferenceService`` on grpc.aio.

The servicer is thin: it turns messages into ``vflcore.wire.oip`` types (``vflcore.wire.oip_serde``), asks
the ``InferenceHandler``, and ends a failed call in ``_abort`` with the status ``failure`` gives. Handlers are
registered by hand under the wire name ``inference.GRPCInferenceService`` rather than through
generated stubs, because our proto package is ``vfl.oip.v2`` (so that our messages and
tritonclient's can live in one process); stock clients therefore reach it unchanged.

Why grpc.aio, on an event loop in its own thread: at batch 1 the model's arithmetic is small
next to gRPC's own Python work, and the synchronous server hands every call from its polling
thread to a pool thread and back, fighting over the GIL. Measured with 8 callers on this
2-core machine, the asyncio server used about a quarter less CPU per request, and its p99 was
lower. ModelInfer runs on the loop itself only for models that declare that ``predict`` just
computes (``servable.computes_inline``); any other model, such as federated inference waiting
on passive parties, runs in a thread pool so that it cannot stall other calls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from vflcore.proto import open_inference_pb2 as pb
from vflcore.runtime.daemon import adopt_torch_threads, run_compute_loop
from vflcore.security.identity import party_from_auth_context
from vflcore.wire import oip_serde as oip_wire
from vflcore.wire.oip import SERVICE, InferRequest
from vflserver.inference.access import refusal
from vflserver.inference.handler import InferenceHandler, failure
from vflserver.inference.reflection import reflection_pool

# Threads for models whose predict may wait (federated inference): concurrent requests wait in
# parallel, up to this many.
BLOCKING_WORKERS = 16


class InferenceServicer:
    """The six RPCs of GRPCInferenceService over one handler (and so one model registry)."""

    def __init__(self, handler: InferenceHandler, pool: futures.Executor) -> None:
        self.handler = handler
        self._pool = pool

    async def server_live(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.handler.live())

    async def server_ready(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        try:
            return pb.ServerReadyResponse(ready=self.handler.ready())
        except Exception as exc:
            await _abort(context, exc, "ServerReady")

    async def model_ready(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        try:
            return pb.ModelReadyResponse(ready=self.handler.model_ready(request.name, request.version))
        except Exception as exc:
            await _abort(context, exc, "ModelReady")

    async def server_metadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        return oip_wire.server_metadata_to_proto(self.handler.metadata)

    async def model_metadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        try:
            return oip_wire.model_metadata_to_proto(self.handler.model_metadata(request.name, request.version))
        except Exception as exc:
            await _abort(context, exc, "ModelMetadata")

    async def model_infer(
        self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInferResponse:
        try:
            ask = oip_wire.infer_request_from_proto(request)
            if self.handler.computes_inline(ask.model, ask.version):
                return self._infer(ask)
            return await asyncio.get_running_loop().run_in_executor(self._pool, self._infer, ask)
        except Exception as exc:
            await _abort(context, exc, "ModelInfer")

    def _infer(self, ask: InferRequest) -> pb.ModelInferResponse:
        return oip_wire.infer_response_to_proto(self.handler.infer(ask))


class GrpcInferenceServer:
    """A grpc.aio server for GRPCInferenceService (plus health and reflection) on its own event loop thread."""

    def __init__(
        self, handler: InferenceHandler, options: Sequence[tuple[str, Any]] = (), *, allow_parties: bool = False
    ) -> None:
        self.handler = handler
        self.allow_parties = allow_parties
        self._options = list(options)
        self._pool = futures.ThreadPoolExecutor(
            max_workers=BLOCKING_WORKERS, thread_name_prefix="oip-predict", initializer=adopt_torch_threads
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=run_compute_loop, args=(self._loop,), name="oip-grpc", daemon=True)
        self._server: grpc.aio.Server | None = None

    def start(self, listen: str, credentials: grpc.ServerCredentials | None) -> int:
        """Bind ``listen`` (plaintext when ``credentials`` is None), start serving; returns the port."""
        self._thread.start()
        try:
            return asyncio.run_coroutine_threadsafe(self._start(listen, credentials), self._loop).result()
        except BaseException:
            self.stop(None)
            raise

    def stop(self, grace_s: float | None) -> None:
        """Stop serving; in-flight calls get ``grace_s`` seconds. Safe to call twice."""
        if self._loop.is_closed():
            return
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop).result()
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _start(self, listen: str, credentials: grpc.ServerCredentials | None) -> int:
        server = grpc.aio.server(options=self._options)
        add_inference_service(server, self.handler, self._pool, allow_parties=self.allow_parties)
        health_servicer = health.aio.HealthServicer()
        for name in ("", SERVICE):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server, pool=reflection_pool()
        )
        try:
            if credentials is None:
                port: int = server.add_insecure_port(listen)
            else:
                port = server.add_secure_port(listen, credentials)
        except RuntimeError as exc:  # grpcio raises instead of returning 0 on a busy or foreign address
            raise OSError(f"could not listen on {listen} (gRPC inference): in use or not local ({exc})") from exc
        if port == 0:
            raise OSError(f"could not listen on {listen} (gRPC inference): the address is in use or not local")
        await server.start()
        self._server = server
        return port


def add_inference_service(
    server: grpc.aio.Server, handler: InferenceHandler, pool: futures.Executor, *, allow_parties: bool = False
) -> None:
    """Serve GRPCInferenceService on ``server`` under its KServe wire name, to the callers ``access`` admits."""
    servicer = InferenceServicer(handler, pool)
    methods: dict[str, tuple[Callable[..., Any], Any, Any]] = {
        "ServerLive": (servicer.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
        "ServerReady": (servicer.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
        "ModelReady": (servicer.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
        "ServerMetadata": (servicer.server_metadata, pb.ServerMetadataRequest, pb.ServerMetadataResponse),
        "ModelMetadata": (servicer.model_metadata, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
        "ModelInfer": (servicer.model_infer, pb.ModelInferRequest, pb.ModelInferResponse),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _admitted(behaviour, allow_parties),
            request_deserializer=request_type.FromString,
            response_serializer=response_type.SerializeToString,
        )
        for name, (behaviour, request_type, response_type) in methods.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


def _admitted(behaviour: Callable[..., Any], allow_parties: bool) -> Callable[..., Any]:
    """``behaviour``, called only for a caller ``access.refusal`` admits; PERMISSION_DENIED for the rest."""

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        refused = refusal(party_from_auth_context(context.auth_context()), allow_parties=allow_parties)
        if refused is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, refused)
        return await behaviour(request, context)

    return call


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, call: str) -> NoReturn:
    code, message = failure(exc, call=call)
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # it always raises
