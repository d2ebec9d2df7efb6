"""Wire codecs round-trip within their stated bounds, and a malformed payload is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vflcore.errors import TensorError
from vflcore.wire.codecs import codec_for_dtype, parse_codec

SHAPES = [(64, 16), (1, 60), (3, 1), (0, 8), (5,), ()]


def _batch(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Embedding-like values over several orders of magnitude, signs mixed."""
    rng = np.random.default_rng(seed)
    return np.asarray(rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 3, size=shape), dtype=np.float32)


def _round_trip(name: str, array: np.ndarray) -> np.ndarray:
    codec = parse_codec(name)
    payload = codec.encode(array)
    assert len(payload) == codec.payload_bytes(array.shape)
    out = codec.decode(payload, array.shape)
    assert out.dtype == np.float32 and out.shape == array.shape
    return out


@pytest.mark.parametrize("shape", SHAPES)
class TestBounds:
    def test_fp32_is_exact(self, shape: tuple[int, ...]) -> None:
        array = _batch(shape)
        assert np.array_equal(_round_trip("fp32", array), array)

    def test_bf16_relative_error_at_most_2_to_the_minus_8(self, shape: tuple[int, ...]) -> None:
        array = _batch(shape)
        out = _round_trip("bf16", array)
        assert (np.abs(out - array) <= 2.0**-8 * np.abs(array)).all()
        # The same rounding as torch's own bfloat16 (round to nearest even).
        assert np.array_equal(out, torch.from_numpy(array).to(torch.bfloat16).float().numpy())

    def test_fp16_relative_error_at_most_2_to_the_minus_11(self, shape: tuple[int, ...]) -> None:
        array = _batch(shape)
        out = _round_trip("fp16", array)
        bound = np.where(np.abs(array) >= 2.0**-14, 2.0**-11 * np.abs(array), 2.0**-25)
        assert (np.abs(out - array) <= bound).all()

    def test_int8_error_at_most_a_row_peak_over_254(self, shape: tuple[int, ...]) -> None:
        array = _batch(shape)
        out = _round_trip("int8", array)
        rows = array.reshape(-1, array.shape[-1] if array.ndim else 1)
        peak = np.abs(rows).max(axis=1, keepdims=True) if rows.size else np.zeros((len(rows), 1))
        assert (np.abs(out.reshape(rows.shape) - rows) <= peak / 254 * (1 + 1e-6)).all()

    def test_topk_keeps_each_rows_largest_values_exactly(self, shape: tuple[int, ...]) -> None:
        array = _batch(shape)
        out = _round_trip("topk:0.25", array).reshape(-1, array.shape[-1] if array.ndim else 1)
        rows = array.reshape(out.shape)
        k = parse_codec("topk:0.25").kept(rows.shape[1])
        for got, row in zip(out, rows, strict=True):
            kept = np.flatnonzero(got)
            assert len(kept) <= k and np.array_equal(got[kept], row[kept])
            dropped = np.setdiff1d(np.arange(len(row)), kept)
            if len(kept) and len(dropped):
                assert np.abs(row[dropped]).max() <= np.abs(row[kept]).min()


class TestSizes:
    def test_bytes_per_value(self) -> None:
        shape = (1024, 60)
        sizes = {name: parse_codec(name).payload_bytes(shape) for name in ("fp32", "bf16", "fp16", "int8", "topk:0.1")}
        assert sizes == {"fp32": 245760, "bf16": 122880, "fp16": 122880, "int8": 65536, "topk:0.1": 49152}


class TestRefusals:
    def test_a_wrong_size_is_refused(self) -> None:
        codec = parse_codec("int8")
        with pytest.raises(TensorError, match="total_bytes"):
            codec.decode(codec.encode(_batch((4, 8)))[:-1], (4, 8))

    def test_a_bad_int8_scale_is_refused(self) -> None:
        codec = parse_codec("int8")
        payload = bytearray(codec.encode(_batch((2, 4))))
        payload[0:4] = np.float32(-1).tobytes()
        with pytest.raises(TensorError, match="scale"):
            codec.decode(bytes(payload), (2, 4))
        payload[0:4] = np.float32(np.inf).tobytes()
        with pytest.raises(TensorError, match="scale"):
            codec.decode(bytes(payload), (2, 4))

    def test_int8_minus_128_is_refused(self) -> None:
        codec = parse_codec("int8")
        payload = bytearray(codec.encode(_batch((1, 4))))
        payload[4] = 0x80
        with pytest.raises(TensorError, match="-128"):
            codec.decode(bytes(payload), (1, 4))

    @pytest.mark.parametrize("bad", [[0, 8], [3, 3], [5, 2]])
    def test_topk_indices_out_of_range_repeated_or_unsorted_are_refused(self, bad: list[int]) -> None:
        codec = parse_codec("topk:0.25")  # 2 of 8 columns
        payload = bytearray(codec.encode(_batch((1, 8))))
        payload[0:8] = np.array(bad, dtype="<u4").tobytes()
        with pytest.raises(TensorError, match="top-k indices"):
            codec.decode(bytes(payload), (1, 8))

    @pytest.mark.parametrize("name", ["bf16", "fp16"])
    def test_a_non_finite_decoded_value_is_refused(self, name: str) -> None:
        codec = parse_codec(name)
        payload = bytearray(codec.encode(_batch((1, 4))))
        payload[0:2] = b"\x80\x7f" if name == "bf16" else b"\x00\x7c"  # +infinity in each format
        with pytest.raises(TensorError, match="NaN or infinite"):
            codec.decode(bytes(payload), (1, 4))

    def test_fp16_refuses_what_it_cannot_hold(self) -> None:
        with pytest.raises(TensorError, match="use bf16"):
            parse_codec("fp16").encode(np.array([[70000.0]], dtype=np.float32))

    @pytest.mark.parametrize("name", ["fp8", "topk", "topk:0", "topk:1.5", "topk:x", "INT8"])
    def test_unknown_names_are_refused_listing_the_choices(self, name: str) -> None:
        with pytest.raises(ValueError, match="is not one of fp32, bf16, fp16, int8, topk:<fraction>"):
            parse_codec(name)

    def test_dtypes_name_codecs_in_one_spelling(self) -> None:
        assert codec_for_dtype("bfloat16") == parse_codec("bf16")
        assert codec_for_dtype("topk:0.1") == parse_codec("topk:0.1")
        assert codec_for_dtype("topk:0.10") is None  # not the canonical spelling
        assert codec_for_dtype("float32") is None and codec_for_dtype("int64") is None


def test_a_long_topk_fraction_means_the_same_k_at_both_ends() -> None:
    """The receiver rebuilds the codec from the announced name: it must keep the same fraction."""
    sent = parse_codec("topk:0.1234567")
    received = codec_for_dtype(sent.dtype)
    assert received == sent and received.kept(81) == sent.kept(81)
    array = _batch((3, 81))
    assert np.array_equal(
        received.decode(sent.encode(array), array.shape), sent.decode(sent.encode(array), array.shape)
    )
