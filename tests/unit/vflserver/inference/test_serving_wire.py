"""The inference endpoint's REST bodies (JSON and binary extension), its [serving] config and its reflection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vflcore.errors import ConfigError
from vflcore.wire.oip import SERVICE, InferResponse, OutputTensor, ProtocolError, array_to_raw
from vflserver.inference.config import RestLimits, ServingConfig, serving_config_from, split_listen
from vflserver.inference.json_wire import infer_request_from_http, infer_response_to_http
from vflserver.inference.reflection import reflection_pool


def _body(document: dict[str, object], *blobs: bytes) -> tuple[bytes, int | None]:
    header = json.dumps(document).encode()
    return header + b"".join(blobs), (len(header) if blobs else None)


class TestJsonRequests:
    def test_json_tensor(self) -> None:
        """inputs[].data, requested outputs with their binary flag, the id and binary_data_output."""
        body, length = _body(
            {
                "id": "r1",
                "inputs": [{"name": "features", "shape": [1, 2], "datatype": "FP32", "data": [[1.0, 2.0]]}],
                "outputs": [{"name": "label", "parameters": {"binary_data": True}}],
                "parameters": {"binary_data_output": False},
            }
        )
        request = infer_request_from_http("digits", "", body, length)
        (tensor,) = request.inputs
        assert (tensor.name, tensor.shape, tensor.values, tensor.raw) == ("features", (1, 2), [[1.0, 2.0]], None)
        assert request.id == "r1" and request.outputs[0].binary is True and request.binary_output is False

    def test_binary_extension_splits_after_the_json_header(self) -> None:
        """Binary inputs take their binary_data_size bytes in order, after Inference-Header-Content-Length."""
        a, b = np.ones((1, 2), np.float32), np.array([7], np.int64)
        body, length = _body(
            {
                "inputs": [
                    {"name": "a", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
                    {"name": "b", "shape": [1], "datatype": "INT64", "parameters": {"binary_data_size": 8}},
                ]
            },
            array_to_raw(a, "FP32"),
            array_to_raw(b, "INT64"),
        )
        request = infer_request_from_http("m", "", body, length)
        assert [t.raw for t in request.inputs] == [array_to_raw(a, "FP32"), array_to_raw(b, "INT64")]

    @pytest.mark.parametrize(
        ("document", "blobs", "message"),
        [
            ({"inputs": "x"}, (), "inputs must be a JSON array"),
            ({}, (), "inputs is missing"),
            ({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}, (), "name must be a non-empty string"),
            ({"inputs": [{"name": "x", "shape": [1.5], "datatype": "FP32"}]}, (), "shape must be an array of integers"),
            (
                {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 9}}]},
                (b"1234",),
                "binary_data_size 9 does not fit the 4 bytes left",
            ),
            ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}, (b"xx",), "2 bytes of binary"),
        ],
    )
    def test_malformed_bodies(self, document: dict[str, object], blobs: tuple[bytes, ...], message: str) -> None:
        body, length = _body(document, *blobs)
        with pytest.raises(ProtocolError, match=message):
            infer_request_from_http("m", "", body, length)

    def test_not_json(self) -> None:
        with pytest.raises(ProtocolError, match="not valid JSON"):
            infer_request_from_http("m", "", b"{oops", None)


class TestJsonResponses:
    def test_json_and_binary_outputs(self) -> None:
        """JSON outputs carry flat data; binary ones a size, their bytes after the header."""
        probabilities = np.array([[0.25, 0.75]], np.float32)
        response = InferResponse(
            "m",
            "1",
            "r1",
            (
                OutputTensor("probabilities", "FP32", probabilities, binary=True),
                OutputTensor("label", "INT64", np.array([1]), binary=False),
            ),
        )
        body, length = infer_response_to_http(response)
        assert length is not None
        document = json.loads(body[:length])
        assert document["id"] == "r1"
        assert document["outputs"][0] == {
            "name": "probabilities",
            "datatype": "FP32",
            "shape": [1, 2],
            "parameters": {"binary_data_size": 8},
        }
        assert document["outputs"][1]["data"] == [1]
        assert body[length:] == probabilities.tobytes()

    def test_all_json_has_no_header_length(self) -> None:
        body, length = infer_response_to_http(InferResponse("m", "1", "", (OutputTensor("x", "FP32", np.ones(2)),)))
        assert length is None and json.loads(body)["outputs"][0]["data"] == [1.0, 1.0]


class TestServingConfig:
    def test_defaults_without_a_table(self) -> None:
        assert serving_config_from({}) == ServingConfig()
        assert ServingConfig().grpc_listen == "127.0.0.1:8001" and ServingConfig().client_auth == "required"

    def test_every_key(self) -> None:
        doc = {
            "serving": {
                "enabled": True,
                "grpc_listen": "0.0.0.0:9001",
                "rest_listen": "[::1]:0",
                "client_auth": "optional",
                "allow_party_certificates": True,
                "degraded": "mean",
                "max_connections": 64,
                "handshake_timeout_s": 2,
                "header_timeout_s": 3.5,
                "body_timeout_s": 20,
                "max_body_bytes": 1024,
            }
        }
        config = serving_config_from(doc, Path("/etc/vfl/server.toml"))
        limits = RestLimits(
            max_connections=64, handshake_timeout_s=2.0, header_timeout_s=3.5, body_timeout_s=20.0, max_body_bytes=1024
        )
        assert config == ServingConfig(True, "0.0.0.0:9001", "[::1]:0", "optional", True, "mean", limits)
        assert not config.require_client_cert

    @pytest.mark.parametrize(
        ("table", "message"),
        [
            ({"client_auth": "sometimes"}, "client_auth = 'sometimes'; choose one of \\['required', 'optional'\\]"),
            ({"grpc_listen": "8001"}, "grpc_listen = '8001'; give host:port"),
            ({"rest_listen": "localhost:http"}, "rest_listen = 'localhost:http'; give host:port"),
            ({"rest_listen": 8000}, "rest_listen = 8000; give host:port"),
            ({"grpc_listen": "127.0.0.1:9000", "rest_listen": "127.0.0.1:9000"}, "are both '127.0.0.1:9000'"),
            ({"enabled": "yes"}, "enabled = 'yes' must be true or false"),
            ({"degraded": "guess"}, "degraded = 'guess'"),
            ({"client_auth_mode": "required"}, "no key 'client_auth_mode'"),
            ({"allow_party_certificates": 1}, "allow_party_certificates = 1 must be true or false"),
            ({"max_connections": 0}, "max_connections = 0; give a whole number, at least 1"),
            ({"max_body_bytes": 1.5}, "max_body_bytes = 1.5; give a whole number"),
            ({"header_timeout_s": 0}, "header_timeout_s = 0; give a number of seconds above 0"),
        ],
    )
    def test_bad_values_name_the_file_and_key(self, table: dict[str, object], message: str) -> None:
        with pytest.raises(ConfigError, match=message) as caught:
            serving_config_from({"serving": table}, Path("server.toml"))
        assert str(caught.value).startswith("server.toml: ")

    def test_split_listen(self) -> None:
        assert split_listen("127.0.0.1:0") == ("127.0.0.1", 0)
        assert split_listen("[::1]:8001") == ("::1", 8001)
        with pytest.raises(ValueError, match="host:port"):
            split_listen("host:70000")


class TestReflectionPool:
    def test_describes_the_service_under_its_wire_name(self) -> None:
        """grpcurl asks for the file defining inference.GRPCInferenceService; it gets a consistent one."""
        pool = reflection_pool()
        service = pool.FindServiceByName(SERVICE)
        assert service.methods_by_name["ModelInfer"].input_type.full_name == "inference.ModelInferRequest"
        infer_input = pool.FindMessageTypeByName("inference.ModelInferRequest.InferInputTensor")
        assert infer_input.fields_by_name["contents"].message_type.full_name == "inference.InferTensorContents"
        assert pool.FindServiceByName("grpc.health.v1.Health").name == "Health"
