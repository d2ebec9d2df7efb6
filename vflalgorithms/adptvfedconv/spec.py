"""AdptVFedConv (003 §3.2-§3.3, Algorithm 1): a shared convolutional extractor, feature maps up once."""

from collections.abc import Mapping
from typing import Any

from vflalgorithms.adptvfedconv.maths import NAME
from vflalgorithms.options import one_of, positive_numbers, whole_numbers
from vflalgorithms.registry import AlgorithmSpec, register
from vflcore.errors import ConfigError

#: Each passive party's feature maps H^k of every aligned row, once (SendEmbeddings, chunked).
FEATURE_MAPS = "adptvfedconv/feature-maps"


def _check(options: Mapping[str, Any]) -> None:
    whole_numbers(options, "image_channels", "channels", "pretrain_epochs", "finetune_epochs")
    for key in ("piece", "grid"):
        value = options[key]
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v >= 1 for v in value)):
            raise ConfigError(f"[algorithm] {key} must be [rows, columns] of whole numbers >= 1, got {value!r}")
    if any(v % 2 for v in options["piece"]):
        raise ConfigError(f"[algorithm] piece {options['piece']} must have even sides (the extractor halves them)")
    one_of(options, "padding", ("replication", "zero"))
    positive_numbers(options, "encoder_lr", "decoder_lr")
    positions = options["positions"]
    if not isinstance(positions, Mapping) or not all(
        str(k).isdigit() and isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
        for k, v in positions.items()
    ):
        raise ConfigError(f"[algorithm] positions must map party ids to [row, column], got {positions!r}")


SPEC = register(
    AlgorithmSpec(
        name=NAME,
        active="vflalgorithms.adptvfedconv.active:AdptVFedConvServer",
        passive="vflalgorithms.adptvfedconv.passive:AdptVFedConvClient",
        reference="vflalgorithms.adptvfedconv.reference:ReferenceAdptVFedConv",
        # The piece layout, W_e's feature channels, the edge padding (§3.3), the active party's
        # pre-training epochs (phase 1), each passive party's autoencoder epochs and learning
        # rates (phase 2: a small one for W_e^k, a normal one for W_g^k). [job] epochs counts the
        # epochs of the server classifier W_s (phase 3).
        defaults={
            "image_channels": 1,
            "piece": [4, 4],
            "grid": [2, 2],
            "positions": {},
            "channels": 16,
            "padding": "replication",
            "pretrain_epochs": 20,
            "finetune_epochs": 10,
            "encoder_lr": 1e-5,
            "decoder_lr": 1e-3,
        },
        check=_check,
    )
)
