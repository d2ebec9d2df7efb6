"""The one place a tensor becomes wire messages, or messages a tensor, for one peer, and bytes are counted.

Both ends talk to a peer through a ``MeteredTensors``: ``encode`` cuts a tensor into chunks
(``vflcore.wire.serde``) and counts each chunk as sent; ``decode``/``decode_stream`` count each
chunk as received and rebuild the tensors, validated. No call site wraps a stream by hand, so
no tensor can cross the wire uncounted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from vflcore.proto import federation_pb2 as pb
from vflcore.wire import serde
from vflcore.wire.codecs import FP32, WireCodec
from vflcore.wire.tensors import TensorKey
from vflcore.wire.traffic import Traffic


class MeteredTensors:
    """Tensors to and from one peer's messages, counted in a shared ``Traffic``."""

    def __init__(self, traffic: Traffic, peer: int) -> None:
        self.traffic, self.peer = traffic, peer

    def encode(self, key: TensorKey, array: np.ndarray, wire: WireCodec = FP32) -> Iterator[pb.TensorChunk]:
        """The chunks of one tensor (a float32 one in the ``wire`` codec), each counted as sent as it is taken."""
        for chunk in serde.tensor_to_chunks(key, array, wire=wire):
            self.traffic.add(self.peer, key, sent=chunk.ByteSize())
            yield chunk

    def decode(
        self, chunks: Iterable[pb.TensorChunk], expect: serde.Announcement | None = None
    ) -> tuple[TensorKey, np.ndarray]:
        """The one tensor a stream carries (refusing a second); ``expect`` checks its announcement."""
        return serde.tensor_from_chunks(self._received(chunks), expect)

    def decode_stream(
        self, chunks: Iterable[pb.TensorChunk], expect: serde.Announcement | None = None
    ) -> Iterator[tuple[TensorKey, np.ndarray]]:
        """Every tensor a stream carries, each as soon as it is whole; ``expect`` checks each announcement."""
        return serde.tensors_from_chunks(self._received(chunks), expect)

    def _received(self, chunks: Iterable[pb.TensorChunk]) -> Iterator[pb.TensorChunk]:
        for chunk in chunks:
            self.traffic.add(self.peer, serde.key_from_proto(chunk.key), received=chunk.ByteSize())
            yield chunk
