"""The protocol-neutral half of the inference endpoint: the model registry, input checks and error kinds."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from vflcore import errors
from vflcore.wire.oip import InferRequest, RequestedOutput, RequestTensor, array_to_raw
from vflserver.inference.handler import InferenceHandler, failure
from vflserver.inference.registry import ModelRegistry
from vflserver.inference.servable import (
    InferenceInputError,
    ModelNotFound,
    PartyUnavailable,
    computes_inline,
)
from vfltesting.servables import DigitsClassifier, digits_rows


def _raw(name: str, array: np.ndarray, datatype: str = "FP32") -> RequestTensor:
    return RequestTensor(name, datatype, array.shape, raw=array_to_raw(array, datatype))


def _request(*inputs: RequestTensor, model: str = "digits", outputs: tuple[str, ...] = ()) -> InferRequest:
    return InferRequest(model, "", "", inputs, tuple(RequestedOutput(name) for name in outputs))


@pytest.fixture
def model() -> DigitsClassifier:
    return DigitsClassifier()


@pytest.fixture
def handler(model: DigitsClassifier) -> InferenceHandler:
    return InferenceHandler(ModelRegistry(model), server_version="9.9")


class TestRegistry:
    def test_add_replaces_a_model_of_the_same_name(self) -> None:
        """A retrained model takes over its name; the old one is no longer served."""
        registry = ModelRegistry(DigitsClassifier(version="1"))
        registry.add(DigitsClassifier(version="2"))
        assert registry.get("digits").servable.version == "2"
        assert len(registry.models()) == 1

    def test_unknown_name_or_version(self) -> None:
        """A missing name or a version that is not the served one is ModelNotFound."""
        registry = ModelRegistry(DigitsClassifier())
        with pytest.raises(ModelNotFound, match="unknown model 'other'; served models: \\['digits'\\]"):
            registry.get("other")
        with pytest.raises(ModelNotFound, match="no version '7'"):
            registry.get("digits", "7")
        assert registry.get("digits", "1").servable.name == "digits"

    def test_remove(self) -> None:
        registry = ModelRegistry(DigitsClassifier())
        registry.remove("digits")
        assert registry.models() == []
        with pytest.raises(ModelNotFound):
            registry.remove("digits")


class TestInfer:
    def test_predictions_equal_the_model_run_in_process(
        self, handler: InferenceHandler, model: DigitsClassifier
    ) -> None:
        """Decoded inputs reach the model unchanged, and its outputs come back in declared order."""
        rows = digits_rows(5)
        answer = handler.infer(_request(_raw("features", rows)))
        expected = model.reference(rows)
        assert [out.name for out in answer.outputs] == ["probabilities", "label"]
        np.testing.assert_array_equal(answer.outputs[0].array, expected["probabilities"])
        np.testing.assert_array_equal(answer.outputs[1].array, expected["label"])
        assert answer.outputs[1].datatype == "INT64"

    def test_requested_outputs_only_and_in_requested_order(self, handler: InferenceHandler) -> None:
        answer = handler.infer(_request(_raw("features", digits_rows(2)), outputs=("label",)))
        assert [out.name for out in answer.outputs] == ["label"]

    def test_typed_values_work_like_raw(self, handler: InferenceHandler) -> None:
        """Typed contents (or JSON data) give the same answer as raw bytes."""
        rows = digits_rows(3)
        typed = RequestTensor("features", "FP32", rows.shape, values=rows.tolist())
        a, b = handler.infer(_request(typed)), handler.infer(_request(_raw("features", rows)))
        np.testing.assert_array_equal(a.outputs[0].array, b.outputs[0].array)

    @pytest.mark.parametrize(
        ("tensor", "message"),
        [
            (_raw("pixels", digits_rows(1)), "unknown input 'pixels'; model takes \\['features'\\]"),
            (_raw("features", np.zeros((1, 24), np.int64), "INT64"), "input 'features': datatype INT64 does not match"),
            (
                _raw("features", np.zeros((1, 24)), "FP64"),
                "input 'features': datatype FP64 does not match the model's FP32",
            ),
            (_raw("features", digits_rows(1, width=23)), "input 'features': dimension 1 must be 24"),
            (_raw("features", digits_rows(2)[0]), "input 'features': expected 2 dimensions"),
            (RequestTensor("features", "FP32", (1, 24), raw=b"\x00" * 95), "input 'features': raw data is 95 bytes"),
            (RequestTensor("features", "FP32", (1, 24)), "input 'features': has no data"),
        ],
    )
    def test_bad_input_names_the_input(self, handler: InferenceHandler, tensor: RequestTensor, message: str) -> None:
        """Every refusal is InferenceInputError and says which input and what is wrong."""
        with pytest.raises(InferenceInputError, match=message):
            handler.infer(_request(tensor))

    def test_missing_input(self, handler: InferenceHandler) -> None:
        with pytest.raises(InferenceInputError, match="missing input 'features'"):
            handler.infer(_request())

    def test_input_given_twice(self, handler: InferenceHandler) -> None:
        tensor = _raw("features", digits_rows(1))
        with pytest.raises(InferenceInputError, match="given twice"):
            handler.infer(_request(tensor, tensor))

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_non_finite_floats_are_refused(self, handler: InferenceHandler, bad: float) -> None:
        rows = digits_rows(2)
        rows[1, 3] = bad
        with pytest.raises(InferenceInputError, match="input 'features': values must be finite"):
            handler.infer(_request(_raw("features", rows)))

    def test_batch_sizes_must_agree(self) -> None:
        """Two inputs with a free batch dimension must bring the same number of rows."""
        model = DigitsClassifier(widths={"rows_0_2": 24, "rows_3_7": 40})
        handler = InferenceHandler(ModelRegistry(model))
        request = _request(_raw("rows_0_2", digits_rows(3)), _raw("rows_3_7", digits_rows(2, width=40)))
        with pytest.raises(InferenceInputError, match="'rows_3_7' has 2 rows but input 'rows_0_2' has 3"):
            handler.infer(request)
        rows = (digits_rows(3), digits_rows(3, width=40))
        answer = handler.infer(_request(_raw("rows_0_2", rows[0]), _raw("rows_3_7", rows[1])))
        np.testing.assert_array_equal(answer.outputs[1].array, model.reference(*rows)["label"])

    def test_unknown_output(self, handler: InferenceHandler) -> None:
        with pytest.raises(InferenceInputError, match="unknown output 'logits'"):
            handler.infer(_request(_raw("features", digits_rows(1)), outputs=("logits",)))

    def test_predict_decides_even_when_not_ready(self, handler: InferenceHandler, model: DigitsClassifier) -> None:
        """ready() is for probes; predict names the missing party, or answers in a degraded mode."""
        model.is_ready = False
        assert handler.infer(_request(_raw("features", digits_rows(1)))).outputs
        model.offline_party = 2
        with pytest.raises(PartyUnavailable, match="party 2"):
            handler.infer(_request(_raw("features", digits_rows(1))))


class TestReadinessAndMetadata:
    def test_ready_needs_a_model_and_every_model_ready(self, model: DigitsClassifier) -> None:
        """No model yet (training still running) is not ready; an unready standalone model makes the server unready."""
        registry = ModelRegistry()
        handler = InferenceHandler(registry)
        assert handler.live() and not handler.ready()
        registry.add(model)
        assert handler.ready()
        model.is_ready = False
        assert not handler.ready() and not handler.model_ready("digits")

    def test_a_federated_model_waiting_for_a_party_leaves_the_server_ready(self, model: DigitsClassifier) -> None:
        """ServerReady: some model ready and every standalone model ready; a waiting federated model is not counted."""
        federated = DigitsClassifier("federated", compute_only=False)
        federated.needs_parties = True  # type: ignore[attr-defined]  # what FederatedServable declares
        handler = InferenceHandler(ModelRegistry(model, federated))
        federated.is_ready = False  # waiting for a passive party
        assert handler.ready() and not handler.model_ready("federated")
        model.is_ready = False  # a standalone model that cannot answer: nothing outside can bring it back
        assert not handler.ready()
        model.is_ready, federated.is_ready = True, True
        alone = InferenceHandler(ModelRegistry(federated))
        assert alone.ready()
        federated.is_ready = False  # the only model waits: no model can answer
        assert not alone.ready()

    def test_model_metadata(self, handler: InferenceHandler) -> None:
        metadata = handler.model_metadata("digits")
        assert (metadata.name, metadata.versions, metadata.platform) == ("digits", ("1",), "pytorch")
        assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [("features", "FP32", (-1, 24))]
        assert [t.name for t in metadata.outputs] == ["probabilities", "label"]

    def test_server_metadata(self, handler: InferenceHandler) -> None:
        assert handler.metadata.name == "vfl-service" and handler.metadata.version == "9.9"
        assert "binary_tensor_data" in handler.metadata.extensions


class TestComputesInline:
    def test_only_an_explicit_true_counts(self) -> None:
        """A servable runs on the gRPC event loop only if it says `compute_only = True`."""
        assert computes_inline(DigitsClassifier(compute_only=True))
        assert not computes_inline(DigitsClassifier(compute_only=False))
        assert not computes_inline(object())


class TestFailureKinds:
    @pytest.mark.parametrize(
        ("exc", "kind"),
        [
            (InferenceInputError("input 'x': bad"), grpc.StatusCode.INVALID_ARGUMENT),
            (ModelNotFound("unknown model"), grpc.StatusCode.NOT_FOUND),
            (PartyUnavailable("party 2 is not connected"), grpc.StatusCode.UNAVAILABLE),
            (errors.PartyUnavailable(3, "timed out"), grpc.StatusCode.UNAVAILABLE),
        ],
    )
    def test_kinds_keep_the_message(self, exc: Exception, kind: grpc.StatusCode) -> None:
        assert failure(exc, call="test") == (kind, str(exc))

    def test_anything_else_is_internal_and_hides_the_details(self) -> None:
        """A server fault tells the caller only its type; the log has the rest."""
        kind, message = failure(KeyError("secret path /srv/model"), call="test")
        assert kind is grpc.StatusCode.INTERNAL and "secret" not in message and "KeyError" in message
