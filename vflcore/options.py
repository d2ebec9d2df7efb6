"""Each algorithm's own settings (the ``[algorithm]`` table of the server config), checked once.

The server's config sets them; they reach every passive party inside the job, so both halves of
an algorithm read the same values through ``algorithm_options``. An unknown key or a bad value
is refused when the server starts, naming the key, rather than halfway through training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vflcore.errors import ConfigError

#: An artificial delay in front of each passive party's upload (``vflcore.delays``), for the
#: thesis's delay scenarios: "none", "round_robin" or "random".
_DELAY = {"delay": "none", "delay_s": 0.2, "delay_probability": 0.25, "delayed_parties": []}

#: Per algorithm: each option's default. An algorithm missing here takes no options.
DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "splitnn": _DELAY,
    # Asynchronous VFL (002 §5.4.2): how many batches a party may run ahead of the slowest one.
    "async": {**_DELAY, "max_staleness": 5},
    # Q, the local updates per communication round (002 §4.3.1); Q = 1 is SplitNN exactly.
    "fedbcd": {"local_steps": 5},
    "vimsgd": {},
    # ρ, the ADMM penalty, and τ, the local SGD steps a client takes on Eq. 10 per round (004 §3.2).
    "vimadmm": {"rho": 1.0, "local_steps": 10},
    # The same for VIMADMM-J (004 §3.3): each local step updates the party's head, then its bottom.
    "vimadmm_j": {"rho": 1.0, "local_steps": 10},
    # APFed (000 §3): λ_p, the weight of passive party p's loss in ∂L/∂h^A (Eq. 8-9), as one
    # ``weight`` for every party or per party in ``party_weights`` ({"2": 0.5}); APFed-C adds
    # the temperature of its contrastive loss (Eq. 14).
    "apfed_r": {"weight": 1.0, "party_weights": {}},
    "apfed_c": {"weight": 1.0, "party_weights": {}, "temperature": 0.5},
    # AdptVFedConv (003): the piece layout, W_e's feature channels, the edge padding (§3.3), the
    # active party's pre-training epochs (phase 1), each passive party's autoencoder epochs and
    # learning rates (phase 2: a small one for W_e^k, a normal one for W_g^k). [job] epochs
    # counts the epochs of the server classifier W_s (phase 3).
    "adptvfedconv": {
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
}


def algorithm_options(algorithm: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` checked against ``algorithm``'s options and completed with their defaults."""
    known = DEFAULTS.get(algorithm, {})
    unknown = sorted(set(given) - set(known))
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ConfigError(f"[algorithm] {unknown[0]} is not an option of {algorithm!r} (its options: {allowed})")
    options = {**known, **given}
    for key in ("local_steps", "max_staleness"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"[algorithm] {key} must be a whole number of at least 1, got {value!r}")
    for key in ("rho", "delay_s", "temperature"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or not value > 0):
            raise ConfigError(f"[algorithm] {key} must be a positive number, got {value!r}")
    if not isinstance(options.get("party_weights", {}), Mapping):
        raise ConfigError(
            f"[algorithm] party_weights must be a table of party id = weight, got {options['party_weights']!r}"
        )
    weights = {"weight": options.get("weight", 0.0), **options.get("party_weights", {})}
    for key, value in weights.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < math.inf:
            where = "weight" if key == "weight" else f"party_weights.{key}"
            raise ConfigError(f"[algorithm] {where} must be a finite number of at least 0, got {value!r}")
    for key in options.get("party_weights", {}):
        if not str(key).isdigit():
            raise ConfigError(f'[algorithm] party_weights keys are party ids such as "2", got {key!r}')
    for key in ("image_channels", "channels", "pretrain_epochs", "finetune_epochs"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"[algorithm] {key} must be a whole number of at least 1, got {value!r}")
    for key in ("piece", "grid"):
        value = options.get(key)
        if value is not None and not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v >= 1 for v in value)
        ):
            raise ConfigError(f"[algorithm] {key} must be [rows, columns] of whole numbers >= 1, got {value!r}")
    piece = options.get("piece")
    if piece is not None and any(v % 2 for v in piece):
        raise ConfigError(f"[algorithm] piece {piece} must have even sides (the extractor halves them)")
    if options.get("padding", "replication") not in ("replication", "zero"):
        raise ConfigError(f"[algorithm] padding = {options['padding']!r}; choose replication or zero")
    for key in ("encoder_lr", "decoder_lr"):
        value = options.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or not value > 0):
            raise ConfigError(f"[algorithm] {key} must be a positive number, got {value!r}")
    positions = options.get("positions", {})
    if not isinstance(positions, Mapping) or not all(
        str(k).isdigit() and isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
        for k, v in positions.items()
    ):
        raise ConfigError(f"[algorithm] positions must map party ids to [row, column], got {positions!r}")
    probability = options.get("delay_probability")
    if probability is not None and not (isinstance(probability, int | float) and 0 <= probability <= 1):
        raise ConfigError(f"[algorithm] delay_probability must be in [0, 1], got {probability!r}")
    delayed = options.get("delayed_parties", [])
    if not isinstance(delayed, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in delayed):
        raise ConfigError(f"[algorithm] delayed_parties must be a list of party ids, got {delayed!r}")
    if options.get("delay", "none") not in ("none", "round_robin", "random"):
        raise ConfigError(f"[algorithm] delay = {options['delay']!r}; choose none, round_robin or random")
    return options
