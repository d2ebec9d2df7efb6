"""The inference endpoint as callers meet it: stock KServe clients and our SDK over mutual TLS.

Real servers on port 0, certificates from the session PKI, a seeded torch model behind the
``Servable`` contract. tritonclient (gRPC and HTTP) is the yardstick for protocol compatibility:
if it works unmodified, other KServe v2 clients should too.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import replace

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from tritonclient.utils import InferenceServerException

from vflclient import InferenceClient, ModelNotFound, ServerUnavailable, TensorRejected
from vflcore.security.tls import TlsFiles, channel_credentials
from vflserver.inference.config import ServingConfig
from vflserver.inference.endpoint import BoundPorts, InferenceEndpoint
from vflserver.inference.registry import ModelRegistry
from vfltesting.pki import Pki
from vfltesting.servables import DigitsClassifier, digits_rows, triton_grpc_client

pytestmark = pytest.mark.integration

LOOPBACK = ServingConfig(grpc_listen="127.0.0.1:0", rest_listen="127.0.0.1:0")


@pytest.fixture(scope="module")
def model() -> DigitsClassifier:
    return DigitsClassifier()


@pytest.fixture(scope="module")
def offline() -> DigitsClassifier:
    """A federated-style model whose passive party dropped out: predict raises PartyUnavailable."""
    servable = DigitsClassifier("splitnn", seed=1, compute_only=False)
    servable.offline_party = 3
    return servable


@pytest.fixture(scope="module")
def endpoint(
    pki: Pki, model: DigitsClassifier, offline: DigitsClassifier, one_torch_thread: None
) -> Iterator[InferenceEndpoint]:
    """The process runs one torch thread, as after any unit test in the same xdist worker: the
    endpoint's threads must compute with it too, or predictions drift 1 ulp from ``model.reference``."""
    with InferenceEndpoint(ModelRegistry(model, offline), LOOPBACK, pki.server_files()) as running:
        yield running


@pytest.fixture(scope="module")
def grpc_client(pki: Pki, endpoint: InferenceEndpoint) -> Iterator[triton_grpc.InferenceServerClient]:
    files = pki.caller_files("test-caller")
    client = triton_grpc_client(endpoint.ports.grpc, files)
    yield client
    client.close()


@pytest.fixture(scope="module")
def http_client(pki: Pki, endpoint: InferenceEndpoint) -> Iterator[triton_http.InferenceServerClient]:
    files = pki.caller_files("test-caller")
    client = triton_http.InferenceServerClient(
        f"127.0.0.1:{endpoint.ports.rest}",
        ssl=True,
        ssl_options={"ca_certs": str(files.ca), "certfile": str(files.cert), "keyfile": str(files.key)},
    )
    yield client
    client.close()


def _grpc_input(name: str, array: np.ndarray, datatype: str = "FP32") -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _http_input(name: str, array: np.ndarray, datatype: str = "FP32", binary: bool = True) -> triton_http.InferInput:
    tensor = triton_http.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def _https(pki: Pki, port: int, *, with_cert: bool = True) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if with_cert:
        files = pki.caller_files("test-caller")
        context.load_cert_chain(str(files.cert), str(files.key))
    return http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)


class TestGrpcWithTritonClient:
    def test_health_and_metadata(self, grpc_client: triton_grpc.InferenceServerClient) -> None:
        """ServerLive, ServerReady, ModelReady, ServerMetadata and ModelMetadata answer a stock client."""
        assert grpc_client.is_server_live() and grpc_client.is_server_ready() and grpc_client.is_model_ready("digits")
        server = grpc_client.get_server_metadata()
        assert server.name == "vfl-service" and "binary_tensor_data" in server.extensions
        metadata = grpc_client.get_model_metadata("digits")
        assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("features", "FP32", [-1, 24])]
        assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
            ("probabilities", "FP32", [-1, 10]),
            ("label", "INT64", [-1]),
        ]

    def test_predictions_equal_the_in_process_model(
        self, grpc_client: triton_grpc.InferenceServerClient, model: DigitsClassifier
    ) -> None:
        """raw_input_contents in, raw_output_contents out, bit-identical to the model run locally."""
        rows = digits_rows(7)
        result = grpc_client.infer("digits", [_grpc_input("features", rows)], request_id="req-1")
        expected = model.reference(rows)
        np.testing.assert_array_equal(result.as_numpy("probabilities"), expected["probabilities"])
        np.testing.assert_array_equal(result.as_numpy("label"), expected["label"])
        assert result.get_response().id == "req-1"

    def test_requested_outputs_only(self, grpc_client: triton_grpc.InferenceServerClient) -> None:
        outputs = [triton_grpc.InferRequestedOutput("label")]
        result = grpc_client.infer("digits", [_grpc_input("features", digits_rows(2))], outputs=outputs)
        assert [out.name for out in result.get_response().outputs] == ["label"]
        assert result.as_numpy("probabilities") is None

    @pytest.mark.parametrize(
        ("tensor", "message"),
        [
            (_grpc_input("features", digits_rows(2, width=23)), "input 'features': dimension 1 must be 24"),
            (_grpc_input("features", digits_rows(2).astype(np.float64), "FP64"), "input 'features': datatype FP64"),
            (_grpc_input("pixels", digits_rows(2)), "unknown input 'pixels'"),
            (_grpc_input("features", np.full((1, 24), np.nan, np.float32)), "input 'features': values must be finite"),
        ],
    )
    def test_bad_input_is_invalid_argument(
        self, grpc_client: triton_grpc.InferenceServerClient, tensor: triton_grpc.InferInput, message: str
    ) -> None:
        with pytest.raises(InferenceServerException, match=message) as caught:
            grpc_client.infer("digits", [tensor])
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"

    def test_unknown_model_is_not_found(self, grpc_client: triton_grpc.InferenceServerClient) -> None:
        with pytest.raises(InferenceServerException, match="unknown model 'mnist'") as caught:
            grpc_client.infer("mnist", [_grpc_input("features", digits_rows(1))])
        assert caught.value.status() == "StatusCode.NOT_FOUND"

    def test_offline_party_is_unavailable(self, grpc_client: triton_grpc.InferenceServerClient) -> None:
        with pytest.raises(InferenceServerException, match="party 3 is not connected") as caught:
            grpc_client.infer("splitnn", [_grpc_input("features", digits_rows(1))])
        assert caught.value.status() == "StatusCode.UNAVAILABLE"


class TestRestWithTritonClient:
    def test_health_and_metadata(self, http_client: triton_http.InferenceServerClient) -> None:
        assert http_client.is_server_live() and http_client.is_server_ready() and http_client.is_model_ready("digits")
        assert http_client.get_server_metadata()["name"] == "vfl-service"
        metadata = http_client.get_model_metadata("digits", model_version="1")
        assert metadata["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, 24]}]

    @pytest.mark.parametrize("binary", [True, False], ids=["binary-extension", "json"])
    def test_predictions_equal_the_in_process_model(
        self, http_client: triton_http.InferenceServerClient, model: DigitsClassifier, binary: bool
    ) -> None:
        """Both the binary tensor extension (tritonclient's default) and plain JSON tensors."""
        rows = digits_rows(4, seed=5)
        outputs = [triton_http.InferRequestedOutput(name, binary_data=binary) for name in ("probabilities", "label")]
        result = http_client.infer("digits", [_http_input("features", rows, binary=binary)], outputs=outputs)
        expected = model.reference(rows)
        np.testing.assert_array_equal(result.as_numpy("probabilities"), expected["probabilities"])
        np.testing.assert_array_equal(result.as_numpy("label"), expected["label"])

    @pytest.mark.parametrize(
        ("tensor", "message"),
        [
            (_http_input("features", digits_rows(2, width=23)), "input 'features': dimension 1 must be 24"),
            (_http_input("features", np.zeros((2, 24), np.int32), "INT32", False), "input 'features': datatype INT32"),
            (_http_input("pixels", digits_rows(2), binary=False), "unknown input 'pixels'"),
        ],
    )
    def test_bad_input_is_400(
        self, http_client: triton_http.InferenceServerClient, tensor: triton_http.InferInput, message: str
    ) -> None:
        with pytest.raises(InferenceServerException, match=message) as caught:
            http_client.infer("digits", [tensor])
        assert caught.value.status() == "400"

    def test_unknown_model_is_404_and_offline_party_503(self, http_client: triton_http.InferenceServerClient) -> None:
        tensor = _http_input("features", digits_rows(1))
        with pytest.raises(InferenceServerException) as missing:
            http_client.infer("mnist", [tensor])
        with pytest.raises(InferenceServerException, match="party 3 is not connected") as offline:
            http_client.infer("splitnn", [tensor])
        assert (missing.value.status(), offline.value.status()) == ("404", "503")

    def test_errors_are_json_and_the_connection_stays_open(self, pki: Pki, endpoint: InferenceEndpoint) -> None:
        """Plain HTTPS (what curl does): JSON errors with the right status, several requests on one connection."""
        connection = _https(pki, endpoint.ports.rest)
        try:
            for path in ("/v2/nowhere", "/%0A]/health", "/v2/models/%0D%0A/ready"):  # line breaks: the fuzz campaign's
                connection.request("GET", path)
                response = connection.getresponse()
                assert response.status == 404 and "error" in json.loads(response.read()), path
            body = json.dumps(
                {"inputs": [{"name": "features", "shape": [1, 24], "datatype": "FP32", "data": [0] * 23}]}
            )
            connection.request("POST", "/v2/models/digits/infer", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 400
            assert json.loads(response.read()) == {
                "error": "input 'features': has 23 values, but shape [1, 24] needs 24"
            }
            connection.request("GET", "/v2/models/digits/ready")
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read()) == {"ready": True}
        finally:
            connection.close()


class TestClientAuth:
    def test_required_rejects_a_caller_without_a_certificate(self, pki: Pki, endpoint: InferenceEndpoint) -> None:
        """With client_auth = required, TLS itself fails for a caller that presents no certificate."""
        client = triton_grpc.InferenceServerClient(
            f"127.0.0.1:{endpoint.ports.grpc}", ssl=True, root_certificates=str(pki.ca)
        )
        with pytest.raises(InferenceServerException) as caught:
            client.is_server_live(client_timeout=10)
        client.close()
        assert caught.value.status() == "StatusCode.UNAVAILABLE"
        connection = _https(pki, endpoint.ports.rest, with_cert=False)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            connection.request("GET", "/v2/health/live")
            connection.getresponse().read()
        connection.close()

    def test_optional_accepts_a_caller_without_a_certificate(self, pki: Pki, model: DigitsClassifier) -> None:
        """With client_auth = optional, a caller with only the CA certificate is served on both protocols."""
        config = ServingConfig(grpc_listen="127.0.0.1:0", rest_listen="127.0.0.1:0", client_auth="optional")
        with InferenceEndpoint(ModelRegistry(model), config, pki.server_files()) as running:
            client = triton_grpc.InferenceServerClient(
                f"127.0.0.1:{running.ports.grpc}", ssl=True, root_certificates=str(pki.ca)
            )
            rows = digits_rows(2)
            result = client.infer("digits", [_grpc_input("features", rows)])
            client.close()
            np.testing.assert_array_equal(result.as_numpy("label"), model.reference(rows)["label"])
            connection = _https(pki, running.ports.rest, with_cert=False)
            connection.request("GET", "/v2/health/ready")
            assert connection.getresponse().status == 200
            connection.close()


class TestWhoMayCall:
    """Least privilege: caller and operator certificates are served; party certificates only when allowed."""

    def _calls(self, pki: Pki, ports: BoundPorts, files: TlsFiles) -> tuple[object, int, int]:
        """(gRPC ServerLive outcome, REST readiness status, REST infer status) for ``files``' certificate."""
        client = triton_grpc_client(ports.grpc, files)
        try:
            live: object = client.is_server_live(client_timeout=10)
        except InferenceServerException as exc:
            live = (exc.status(), exc.message())
        client.close()
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(files.cert), str(files.key))
        statuses = []
        for method, path, body in (("GET", "/v2/health/ready", None), ("POST", "/v2/models/digits/infer", "{}")):
            connection = http.client.HTTPSConnection("127.0.0.1", ports.rest, context=context, timeout=10)
            connection.request(method, path, body)
            response = connection.getresponse()
            document = json.loads(response.read())
            connection.close()
            if response.status == 403:
                assert "party 2's certificate may not call" in document["error"], document
            statuses.append(response.status)
        return live, statuses[0], statuses[1]

    def test_party_certificates_are_refused_by_default(self, pki: Pki, endpoint: InferenceEndpoint) -> None:
        """A passive party knows every aligned ID: its certificate gets PERMISSION_DENIED and 403 on every call."""
        live, ready, infer = self._calls(pki, endpoint.ports, pki.party_files(2))
        assert isinstance(live, tuple) and live[0] == "StatusCode.PERMISSION_DENIED", live
        assert "party 2's certificate may not call the inference endpoint" in str(live[1])
        assert "allow_party_certificates" in str(live[1])
        assert (ready, infer) == (403, 403)

    def test_callers_and_operators_are_served(self, pki: Pki, endpoint: InferenceEndpoint) -> None:
        for files in (pki.caller_files("test-caller"), pki.operator_files("alice")):
            assert self._calls(pki, endpoint.ports, files) == (True, 200, 400)  # 400: "{}" has no inputs

    def test_an_explicit_setting_lets_party_certificates_in(self, pki: Pki, model: DigitsClassifier) -> None:
        config = replace(LOOPBACK, allow_party_certificates=True)
        with InferenceEndpoint(ModelRegistry(model), config, pki.server_files()) as running:
            assert self._calls(pki, running.ports, pki.party_files(2)) == (True, 200, 400)


class TestReflectionAndLifecycle:
    def test_reflection_lists_the_stock_service_name(self, pki: Pki, endpoint: InferenceEndpoint) -> None:
        """grpcurl-style discovery: the service is listed, and its file resolves under `inference`."""
        channel = grpc.secure_channel(
            f"127.0.0.1:{endpoint.ports.grpc}", channel_credentials(pki.caller_files("test-caller"))
        )
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        asks = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="inference.GRPCInferenceService"),
        ]
        listed, described = list(stub.ServerReflectionInfo(iter(asks), timeout=10))
        channel.close()
        names = {service.name for service in listed.list_services_response.service}
        assert "inference.GRPCInferenceService" in names and "grpc.health.v1.Health" in names
        assert described.file_descriptor_response.file_descriptor_proto  # not an error response

    def test_a_model_added_later_is_served_on_both_protocols(self, pki: Pki, model: DigitsClassifier) -> None:
        """Training finishes after the endpoint started: the registry change is visible at once."""
        registry = ModelRegistry()
        with InferenceEndpoint(registry, LOOPBACK, pki.server_files()) as running:
            with InferenceClient(f"127.0.0.1:{running.ports.grpc}", tls=pki.caller_files("test-caller")) as client:
                assert client.live() and not client.ready()
                registry.add(model)
                assert client.ready() and client.model_ready("digits")
            connection = _https(pki, running.ports.rest)
            connection.request("GET", "/v2/models/digits")
            assert json.loads(connection.getresponse().read())["name"] == "digits"
            connection.close()

    def test_stop_ends_open_connections_and_frees_both_ports(self, pki: Pki, model: DigitsClassifier) -> None:
        """stop() returns with a keep-alive connection still open, and nothing listens afterwards."""
        endpoint = InferenceEndpoint(ModelRegistry(model), LOOPBACK, pki.server_files())
        ports = endpoint.start()
        connection = _https(pki, ports.rest)
        connection.request("GET", "/v2/health/live")
        assert connection.getresponse().read() == b'{"live":true}'
        endpoint.stop()
        endpoint.stop()  # twice is harmless
        connection.close()
        for port in (ports.grpc, ports.rest):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5)


class TestSdk:
    @pytest.fixture
    def client(self, pki: Pki, endpoint: InferenceEndpoint) -> Iterator[InferenceClient]:
        with InferenceClient(f"127.0.0.1:{endpoint.ports.grpc}", tls=pki.caller_files("test-caller")) as client:
            yield client

    def test_round_trip(self, client: InferenceClient, model: DigitsClassifier) -> None:
        """live, ready, metadata and infer; the answer equals the model run in process."""
        assert client.live() and client.ready()
        assert client.server_metadata().name == "vfl-service"
        metadata = client.metadata("digits")
        assert [t.name for t in metadata.outputs] == ["probabilities", "label"]
        rows = digits_rows(6, seed=9)
        outputs = client.infer("digits", {"features": rows})
        expected = model.reference(rows)
        np.testing.assert_array_equal(outputs["probabilities"], expected["probabilities"])
        np.testing.assert_array_equal(outputs["label"], expected["label"])
        assert list(client.infer("digits", {"features": rows}, outputs=["label"])) == ["label"]

    def test_errors(self, client: InferenceClient) -> None:
        """A refused input names it; unknown model and offline party map to the SDK's errors."""
        with pytest.raises(TensorRejected, match="input 'features': dimension 1 must be 24"):
            client.infer("digits", {"features": digits_rows(1, width=20)})
        with pytest.raises(ModelNotFound, match="unknown model 'mnist'"):
            client.metadata("mnist")
        with pytest.raises(ServerUnavailable, match="party 3"):
            client.infer("splitnn", {"features": digits_rows(1)})
