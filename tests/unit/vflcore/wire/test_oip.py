"""The Open Inference Protocol's tensor layout, the protobuf serde, and wire compatibility with KServe."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as triton_pb

from vflcore.proto import open_inference_pb2 as pb
from vflcore.wire import oip_serde as oip_wire
from vflcore.wire.oip import (
    InferRequest,
    InferResponse,
    ModelMetadata,
    OutputTensor,
    ProtocolError,
    RequestedOutput,
    RequestTensor,
    ServerMetadata,
    TensorMetadata,
    array_from_raw,
    array_from_values,
    array_to_raw,
    datatype_of,
    decode_bytes_elements,
    encode_bytes_elements,
)


class TestRawLayout:
    @pytest.mark.parametrize(
        ("datatype", "array"),
        [
            ("FP32", np.arange(6, dtype=np.float32).reshape(2, 3) / 7),
            ("FP64", np.array([[1e-300, -2.5]])),
            ("INT32", np.array([-(2**31), 2**31 - 1], dtype=np.int32)),
            ("INT64", np.array([[-(2**63)], [2**63 - 1]], dtype=np.int64)),
            ("BOOL", np.array([True, False, True])),
        ],
    )
    def test_numeric_round_trip(self, datatype: str, array: np.ndarray) -> None:
        """Every numeric datatype survives raw encoding bit for bit, shape included."""
        back = array_from_raw(array_to_raw(array, datatype), datatype, array.shape)
        np.testing.assert_array_equal(back, array)
        assert back.dtype == array.dtype and back.flags.writeable

    def test_raw_is_little_endian_row_major(self) -> None:
        """The bytes are the elements in row-major order, little-endian, with no padding."""
        raw = array_to_raw(np.array([[1, 2], [3, 4]], dtype=np.int32), "INT32")
        assert raw == b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00"

    def test_bytes_elements_carry_a_four_byte_little_endian_length(self) -> None:
        """KServe's BYTES layout: a uint32 LE length before each element; str travels as UTF-8."""
        assert encode_bytes_elements([b"ab", "é", b""]) == b"\x02\x00\x00\x00ab\x02\x00\x00\x00\xc3\xa9\x00\x00\x00\x00"

    def test_bytes_tensor_round_trip(self) -> None:
        """A BYTES tensor decodes to an object array of bytes with the declared shape."""
        array = np.array([[b"id-1", b"id-22"], [b"", b"\x00\xff"]], dtype=np.object_)
        back = array_from_raw(array_to_raw(array, "BYTES"), "BYTES", (2, 2))
        assert back.shape == (2, 2) and back.tolist() == array.tolist()

    @pytest.mark.parametrize(
        ("raw", "message"),
        [
            (b"\x05\x00\x00\x00abc", "claims 5 bytes"),
            (b"\x01\x00", "ends inside the length"),
            (b"\x01\x00\x00\x00a\x00", "after its 1 elements"),
        ],
    )
    def test_malformed_bytes_are_refused(self, raw: bytes, message: str) -> None:
        """Truncated or over-long BYTES data raises before anything is trusted."""
        with pytest.raises(ProtocolError, match=message):
            decode_bytes_elements(raw, 1)

    def test_size_mismatch_names_both_sizes(self) -> None:
        """Raw data of the wrong length says what it got and what the shape needs."""
        with pytest.raises(ProtocolError, match="raw data is 8 bytes, but FP32 \\[1, 3\\] needs 12"):
            array_from_raw(b"\x00" * 8, "FP32", (1, 3))

    def test_negative_dimension_is_refused(self) -> None:
        with pytest.raises(ProtocolError, match="negative"):
            array_from_raw(b"", "FP32", (-1, 3))

    def test_datatype_of_numpy_arrays(self) -> None:
        """Arrays map to their KServe datatype; text becomes BYTES; float16 is refused."""
        assert datatype_of(np.zeros(1, np.float32)) == "FP32"
        assert datatype_of(np.zeros(1, np.int64)) == "INT64"
        assert datatype_of(np.array(["a"])) == "BYTES"
        with pytest.raises(ProtocolError, match="float16"):
            datatype_of(np.zeros(1, np.float16))


class TestTypedValues:
    def test_nested_and_flat_json_data_agree(self) -> None:
        """KServe allows nested or flat row-major data; both give the same array."""
        flat = array_from_values([1, 2.5, 3, 4], "FP32", (2, 2))
        nested = array_from_values([[1, 2.5], [3, 4]], "FP32", (2, 2))
        np.testing.assert_array_equal(flat, nested)

    @pytest.mark.parametrize(
        ("values", "datatype", "shape", "message"),
        [
            ([True, 1.0], "FP32", (2,), "True is not a FP32 value"),
            (["1.0", 2.0], "FP32", (2,), "'1.0' is not a FP32 value"),
            ([1.5], "INT64", (1,), "1.5 is not a INT64 value"),
            ([None], "FP64", (1,), "None is not a FP64 value"),
            ([2**40], "INT32", (1,), "does not fit INT32"),
            ([1.0, 2.0, 3.0], "FP32", (2,), "has 3 values, but shape \\[2\\] needs 2"),
        ],
    )
    def test_wrong_values_are_refused(
        self, values: list[object], datatype: str, shape: tuple[int, ...], message: str
    ) -> None:
        """A value of the wrong type, range or count is named in the error."""
        with pytest.raises(ProtocolError, match=message):
            array_from_values(values, datatype, shape)

    def test_strings_become_utf8_bytes(self) -> None:
        """JSON strings for a BYTES tensor arrive as UTF-8 bytes, like raw BYTES elements."""
        assert array_from_values(["a", "é"], "BYTES", (2,)).tolist() == [b"a", "é".encode()]


class TestProtobufSerde:
    def test_infer_request_round_trip(self) -> None:
        """What the SDK sends, the server reads back: names, datatypes, shapes, raw bytes, outputs."""
        features = np.ones((2, 3), np.float32)
        request = InferRequest(
            model="digits",
            version="1",
            id="req-7",
            inputs=(RequestTensor("features", "FP32", (2, 3), raw=array_to_raw(features, "FP32")),),
            outputs=(RequestedOutput("label"),),
        )
        assert oip_wire.infer_request_from_proto(oip_wire.infer_request_to_proto(request)) == request

    def test_typed_contents_are_accepted(self) -> None:
        """A request with typed contents instead of raw bytes carries the values."""
        msg = pb.ModelInferRequest(model_name="m")
        msg.inputs.add(name="x", datatype="FP32", shape=[2]).contents.fp32_contents.extend([1.0, 2.0])
        (tensor,) = oip_wire.infer_request_from_proto(msg).inputs
        assert tensor.raw is None and list(tensor.values or []) == [1.0, 2.0]

    def test_raw_count_must_match_inputs(self) -> None:
        """One raw entry per input, or the request is refused."""
        msg = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"", b""])
        msg.inputs.add(name="x", datatype="FP32", shape=[0])
        with pytest.raises(ProtocolError, match="2 entries for 1 inputs"):
            oip_wire.infer_request_from_proto(msg)

    def test_infer_response_round_trip(self) -> None:
        """The server's raw outputs decode to the same arrays on the client."""
        response = InferResponse(
            "digits",
            "1",
            "req-7",
            (
                OutputTensor("probabilities", "FP32", np.full((2, 10), 0.1, np.float32)),
                OutputTensor("label", "INT64", np.array([3, 9])),
                OutputTensor("id", "BYTES", np.array([b"a", b"b"], dtype=object)),
            ),
        )
        back = oip_wire.infer_response_from_proto(oip_wire.infer_response_to_proto(response))
        assert (back.model, back.version, back.id) == ("digits", "1", "req-7")
        for got, sent in zip(back.outputs, response.outputs, strict=True):
            assert (got.name, got.datatype) == (sent.name, sent.datatype)
            np.testing.assert_array_equal(got.array, sent.array)

    def test_metadata_round_trips(self) -> None:
        model = ModelMetadata(
            "digits",
            ("1",),
            "pytorch",
            (TensorMetadata("features", "FP32", (-1, 24)),),
            (TensorMetadata("label", "INT64", (-1,)),),
        )
        server = ServerMetadata("vfl-service", "0.1.0", ("binary_tensor_data",))
        assert oip_wire.model_metadata_from_proto(oip_wire.model_metadata_to_proto(model)) == model
        assert oip_wire.server_metadata_from_proto(oip_wire.server_metadata_to_proto(server)) == server


class TestWireCompatibility:
    def test_every_field_matches_kserve(self) -> None:
        """Each message and field of ours has the name, number and type of the stock `inference` proto."""

        def walk(descriptor, path):  # type: ignore[no-untyped-def]
            yield path, descriptor
            for nested in descriptor.nested_types:
                yield from walk(nested, (*path, nested.name))

        for name, top in pb.DESCRIPTOR.message_types_by_name.items():
            for path, ours in walk(top, (name,)):
                theirs = triton_pb.DESCRIPTOR.message_types_by_name[path[0]]
                for part in path[1:]:
                    theirs = theirs.nested_types_by_name[part]
                for field in ours.fields:
                    other = theirs.fields_by_name[field.name]
                    assert (field.number, field.type) == (other.number, other.type), (path, field.name)

    def test_service_methods_match(self) -> None:
        """The six RPCs exist in the stock service with the same request and response messages."""
        ours = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
        theirs = triton_pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
        for rpc in ours.methods:
            other = theirs.methods_by_name[rpc.name]
            assert (rpc.input_type.name, rpc.output_type.name) == (other.input_type.name, other.output_type.name)
