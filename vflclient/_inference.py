"""Query a served model from Python: the KServe v2 (Open Inference Protocol) gRPC API over mutual TLS.

Any KServe v2 client works against ``vfl-server``'s inference endpoint (tritonclient, or curl on
the REST side). This one needs nothing beyond the project's own dependencies, presents the
caller's certificate from ``TlsFiles``, sends tensors as raw bytes, and raises the SDK's errors::

    with InferenceClient("vfl.example.org:8001", tls=tls) as client:
        outputs = client.infer("digits", {"features": features})   # {"probabilities": ..., "label": ...}

A refused input raises ``TensorRejected`` (its message names the input), an unknown model
``ModelNotFound``, an unreachable server or a model waiting for an offline party
``ServerUnavailable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
import numpy as np
import structlog

from vflclient._exceptions import translated
from vflcore.errors import VflError
from vflcore.proto import open_inference_pb2 as pb
from vflcore.security.tls import TlsFiles, channel_credentials
from vflcore.wire import oip_serde as oip_wire
from vflcore.wire.oip import (
    InferRequest,
    ModelMetadata,
    ProtocolError,
    RequestedOutput,
    RequestTensor,
    ServerMetadata,
    array_to_raw,
    datatype_of,
    method,
)

log = structlog.get_logger(__name__)

# Tensors of a large batch can exceed gRPC's 4 MiB default; the endpoint accepts up to 64 MiB.
_MAX_MESSAGE_BYTES = 64 << 20


class InferenceClient:
    """A channel to one inference endpoint; calls are thread-safe, ``close()`` ends the channel."""

    def __init__(
        self,
        address: str,
        *,
        tls: TlsFiles | None,
        insecure: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        if tls is None and not insecure:
            raise ValueError("TLS files are required; plaintext needs insecure=True")
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
        ]
        if insecure:
            log.warning("insecure_mode", warning="plaintext inference channel: no encryption, no server verification")
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            assert tls is not None
            self._channel = grpc.secure_channel(address, channel_credentials(tls), options=options)
        self.address, self.timeout_s = address, timeout_s
        self._stubs: dict[str, grpc.UnaryUnaryMultiCallable] = {}

    # ---- calls ------------------------------------------------------------------------------

    def live(self) -> bool:
        """Whether the server answers."""
        reply: pb.ServerLiveResponse = self._call("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse)
        return reply.live

    def ready(self) -> bool:
        """Whether the server holds models and every one of them can infer now."""
        reply: pb.ServerReadyResponse = self._call("ServerReady", pb.ServerReadyRequest(), pb.ServerReadyResponse)
        return reply.ready

    def model_ready(self, model: str, version: str = "") -> bool:
        """Whether ``model`` can infer now (a federated model needs every party online)."""
        request = pb.ModelReadyRequest(name=model, version=version)
        reply: pb.ModelReadyResponse = self._call("ModelReady", request, pb.ModelReadyResponse)
        return reply.ready

    def server_metadata(self) -> ServerMetadata:
        """The server's name, version and protocol extensions."""
        reply = self._call("ServerMetadata", pb.ServerMetadataRequest(), pb.ServerMetadataResponse)
        return oip_wire.server_metadata_from_proto(reply)

    def metadata(self, model: str, version: str = "") -> ModelMetadata:
        """The model's inputs and outputs: names, datatypes and shapes (-1 for the batch)."""
        request = pb.ModelMetadataRequest(name=model, version=version)
        return oip_wire.model_metadata_from_proto(self._call("ModelMetadata", request, pb.ModelMetadataResponse))

    def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] = (),
        version: str = "",
        request_id: str = "",
    ) -> dict[str, np.ndarray]:
        """Run ``model`` on named arrays; returns the named outputs (all, or those in ``outputs``)."""
        tensors = []
        for name, value in inputs.items():
            array = np.asarray(value)
            try:
                datatype = datatype_of(array)
            except ProtocolError as exc:
                raise ValueError(f"input {name!r}: {exc}") from None
            tensors.append(RequestTensor(name, datatype, array.shape, raw=array_to_raw(array, datatype)))
        request = InferRequest(
            model=model,
            version=version,
            id=request_id,
            inputs=tuple(tensors),
            outputs=tuple(RequestedOutput(name) for name in outputs),
        )
        reply = self._call("ModelInfer", oip_wire.infer_request_to_proto(request), pb.ModelInferResponse)
        try:
            answer = oip_wire.infer_response_from_proto(reply)
        except ProtocolError as exc:
            raise VflError(f"ModelInfer: the server's answer is malformed: {exc}") from exc
        return {output.name: output.array for output in answer.outputs}

    # ---- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channel; safe to call twice."""
        self._channel.close()

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _call(self, rpc: str, request: Any, response_type: Any) -> Any:
        call = self._stubs.get(rpc)
        if call is None:  # no generated stub: its method paths would name our proto package
            call = self._stubs[rpc] = self._channel.unary_unary(
                method(rpc),
                request_serializer=type(request).SerializeToString,
                response_deserializer=response_type.FromString,
            )
        # The endpoint's address in every error: a caller whose request timed out learns which server
        # (host) it could not reach, not only "Deadline Exceeded".
        with translated(f"{rpc} to {self.address}"):
            return call(request, timeout=self.timeout_s)
