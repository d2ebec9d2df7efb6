"""Wire codecs: smaller encodings of the float32 embeddings and gradients a training step exchanges.

Over a WAN the link, not the computation, sets the pace of a step (issue 17), so a job may trade
precision for bytes with ``[job] wire_codec``. A codec turns a float32 tensor into a payload and
back; the chunk layer (``vflcore.wire.serde``) announces it in the ``dtype`` field of the first
chunk, with the tensor's own (decoded) shape, so the receiver knows the exact payload size before
it buffers a byte, exactly as for a plain dtype. Decoding validates as strictly as float32 does:
the size, finite values, and each codec's own invariants (a scale that is finite and not
negative, an index inside its row and strictly increasing).

Each codec's error bound, per element x of a row r (the bound the tests hold it to):

========  ===============  ===========================================================================
codec     bytes / value    error bound
========  ===============  ===========================================================================
fp32      4                none: the float32 bytes as today
bf16      2                |x̂ − x| ≤ 2⁻⁸·|x| (round to nearest even, 8 bits of mantissa) for normal x;
                           ≤ 2⁻¹³⁴ for float32's subnormals (|x| < 2⁻¹²⁶)
fp16      2                |x̂ − x| ≤ 2⁻¹¹·|x| for |x| ≥ 2⁻¹⁴, ≤ 2⁻²⁵ below; |x| > 65504 is refused
int8      1 + 4 per row    |x̂ − x| ≤ max|r| / 254 (symmetric, one float32 scale per row)
topk:f    8 per kept value each row keeps its k = ⌈f·columns⌉ largest |x| exactly; the rest become 0
========  ===============  ===========================================================================

A tensor is seen as rows × columns: its last dimension is the columns (a 0-d or 1-d tensor is one
row). Only float32 tensors are encoded; anything else (row indices, PSI points) travels as is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vflcore.errors import TensorError
from vflcore.job.spec import CODEC_NAMES, FIXED_CODECS, JobSpec, codec_refusal, topk_fraction

__all__ = ["CODEC_NAMES", "FP32", "WireCodec", "codec_for_dtype", "job_codecs", "parse_codec"]

_FP16_MAX = 65504.0


def _rows(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, columns) of a tensor of ``shape``: the last dimension is the columns."""
    if not shape:
        return 1, 1
    columns = shape[-1]
    return (math.prod(shape[:-1]) if columns else 0), columns


@dataclass(frozen=True)
class WireCodec:
    """One encoding. ``dtype`` is what the first chunk announces; ``fp32`` announces plain float32."""

    name: str
    dtype: str
    fraction: float = 0.0  # topk only

    @property
    def lossless(self) -> bool:
        return self.name == "fp32"

    def kept(self, columns: int) -> int:
        """Values topk keeps per row of ``columns``."""
        return min(columns, max(1, math.ceil(self.fraction * columns))) if columns else 0

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        """The exact payload size of a tensor of ``shape``: what the receiver checks before buffering."""
        rows, columns = _rows(shape)
        n = rows * columns
        if self.name == "fp32":
            return 4 * n
        if self.name in ("bf16", "fp16"):
            return 2 * n
        if self.name == "int8":
            return 4 * rows + n
        return 8 * rows * self.kept(columns)

    def encode(self, array: np.ndarray) -> bytes:
        """The payload of a finite float32 ``array`` (TensorError naming the field if it cannot be encoded)."""
        values = np.ascontiguousarray(array, dtype=np.float32)
        rows, columns = _rows(values.shape)
        flat = values.reshape(rows, columns)
        if self.name == "fp32":
            return flat.astype("<f4", copy=False).tobytes()
        if self.name == "bf16":
            bits = _to_bfloat16(flat)
            if bits.size and bool(((bits & 0x7F80) == 0x7F80).any()):  # rounded up past float32's largest value
                raise TensorError("data", "a value rounds to infinity in bf16; it is too close to float32's limit")
            return bits.astype("<u2", copy=False).tobytes()
        if self.name == "fp16":
            if flat.size and float(np.abs(flat).max()) > _FP16_MAX:
                raise TensorError("data", f"a value above {_FP16_MAX:g} in magnitude cannot be sent as fp16; use bf16")
            return flat.astype("<f2").tobytes()
        if self.name == "int8":
            peak = np.abs(flat).max(axis=1) if columns else np.zeros(rows, dtype=np.float32)
            scale = (peak / 127).astype(np.float32)
            safe = np.where(scale > 0, scale, 1).astype(np.float32)
            quantised = np.clip(np.rint(flat / safe[:, None]), -127, 127).astype(np.int8)
            payload: bytes = scale.astype("<f4").tobytes() + quantised.tobytes()
            return payload
        k = self.kept(columns)
        # The k largest magnitudes per row, in column order (sorted indices make the payload canonical).
        top = np.sort(np.argpartition(-np.abs(flat), k - 1, axis=1)[:, :k], axis=1) if k else np.zeros((rows, 0))
        index = top.astype("<u4")
        kept = np.take_along_axis(flat, top.astype(np.int64), axis=1).astype("<f4")
        return index.tobytes() + kept.tobytes()

    def decode(self, payload: bytes | bytearray | memoryview, shape: tuple[int, ...]) -> np.ndarray:
        """The float32 tensor of ``shape`` a payload stands for; TensorError naming the field if it is malformed."""
        if len(payload) != self.payload_bytes(shape):
            raise TensorError("total_bytes", f"{len(payload)} bytes is not a {self.name} tensor of shape {list(shape)}")
        rows, columns = _rows(shape)
        if self.name == "fp32":
            out = np.frombuffer(payload, dtype="<f4")
        elif self.name == "bf16":
            out = (np.frombuffer(payload, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif self.name == "fp16":
            out = np.frombuffer(payload, dtype="<f2").astype(np.float32)
        elif self.name == "int8":
            scale = np.frombuffer(payload, dtype="<f4", count=rows)
            if not (np.isfinite(scale).all() and (scale >= 0).all()):
                raise TensorError("data", "an int8 row scale is negative, NaN or infinite")
            quantised = np.frombuffer(payload, dtype=np.int8, offset=4 * rows).reshape(rows, columns)
            if quantised.size and int(quantised.min()) < -127:
                raise TensorError("data", "int8 value -128 is outside the symmetric range [-127, 127]")
            out = quantised.astype(np.float32) * scale[:, None]
        else:
            out = self._decode_topk(payload, rows, columns)
        out = out.reshape(shape)
        if not np.isfinite(out).all():
            raise TensorError("data", f"the decoded {self.name} tensor holds NaN or infinite values")
        return out

    def _decode_topk(self, payload: bytes | bytearray | memoryview, rows: int, columns: int) -> np.ndarray:
        k = self.kept(columns)
        index = np.frombuffer(payload, dtype="<u4", count=rows * k).reshape(rows, k).astype(np.int64)
        kept = np.frombuffer(payload, dtype="<f4", offset=4 * rows * k).reshape(rows, k)
        if index.size and (int(index.max()) >= columns or (k > 1 and bool((np.diff(index, axis=1) <= 0).any()))):
            raise TensorError("data", f"top-k indices must be strictly increasing column numbers below {columns}")
        out = np.zeros((rows, columns), dtype=np.float32)
        np.put_along_axis(out, index, kept, axis=1)
        return out


def _to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bits, rounding to nearest even (what torch's ``.to(torch.bfloat16)`` does)."""
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


FP32 = WireCodec("fp32", "float32")
_FIXED = {
    c.name: c
    for c in (FP32, WireCodec("bf16", "bfloat16"), WireCodec("fp16", "float16"), WireCodec("int8", "int8-rows"))
}
_BY_DTYPE = {c.dtype: c for c in _FIXED.values() if c.name != "fp32"}
#: The codecs ``[job] wire_codec`` accepts (``vflcore.job.spec.CODEC_NAMES``); ``topk:0.1`` keeps a tenth.
assert tuple(_FIXED) == FIXED_CODECS, "vflcore.job.spec.FIXED_CODECS names the codecs built here"


def parse_codec(name: str) -> WireCodec:
    """The codec ``[job] wire_codec`` names; ValueError that lists the choices otherwise (``codec_refusal``)."""
    if name in _FIXED:
        return _FIXED[name]
    fraction = topk_fraction(name)
    if fraction is None:
        raise ValueError(codec_refusal(name))
    # One spelling, and the fraction that spelling says: both ends compute the same k from it.
    canonical = f"{fraction:g}"
    return WireCodec(f"topk:{canonical}", f"topk:{canonical}", float(canonical))


def job_codecs(job: JobSpec) -> tuple[WireCodec, WireCodec]:
    """(up, down): the codec of what passive parties send in training steps, and of what they get back.

    ``[job] wire_codec_up`` / ``wire_codec_down`` override ``wire_codec`` for one direction.
    """
    return parse_codec(job.wire_codec_up or job.wire_codec), parse_codec(job.wire_codec_down or job.wire_codec)


def codec_for_dtype(dtype: str) -> WireCodec | None:
    """The codec a chunk's announced ``dtype`` names, or None for a plain dtype (float32 included)."""
    if dtype in _BY_DTYPE:
        return _BY_DTYPE[dtype]
    if dtype.startswith("topk:"):
        try:
            codec = parse_codec(dtype)
        except ValueError:
            return None
        return codec if codec.dtype == dtype else None  # one spelling per fraction: the canonical one
    return None
