"""APFed-R and APFed-C (000/001 §3): the active party learns from the passive parties, then predicts alone."""

import math
from collections.abc import Mapping
from typing import Any

from vflalgorithms.apfed.maths import APFED_C, APFED_R
from vflalgorithms.options import is_number, party_ids, positive_numbers
from vflalgorithms.registry import AlgorithmSpec, register
from vflcore.errors import ConfigError

# h^A = f_A(x^A_B) goes down to every passive party (on ReturnGradients); each answers with
# ∂L_p/∂h^A (on SendEmbeddings). Both are (rows, embedding_dim).
ACTIVE_EMBEDDING = "apfed/active-embedding"
PASSIVE_GRADIENT = "apfed/passive-gradient"


def _check_weights(options: Mapping[str, Any]) -> None:
    """λ_p: one ``weight`` for every party, or per party in ``party_weights`` ({"2": 0.5})."""
    if not isinstance(options["party_weights"], Mapping):
        raise ConfigError(
            f"[algorithm] party_weights must be a table of party id = weight, got {options['party_weights']!r}"
        )
    for key, value in {"weight": options["weight"], **options["party_weights"]}.items():
        if not is_number(value) or not 0 <= value < math.inf:
            where = "weight" if key == "weight" else f"party_weights.{key}"
            raise ConfigError(f"[algorithm] {where} must be a finite number of at least 0, got {value!r}")
    if not party_ids(options["party_weights"]):
        bad = next(k for k in options["party_weights"] if not str(k).isdigit())
        raise ConfigError(f'[algorithm] party_weights keys are party ids such as "2", got {bad!r}')


def _check_contrastive(options: Mapping[str, Any]) -> None:
    _check_weights(options)
    positive_numbers(options, "temperature")


_WEIGHTS = {"weight": 1.0, "party_weights": {}}

SPEC_R = register(
    AlgorithmSpec(
        name=APFED_R,
        active="vflalgorithms.apfed.active:APFedServer",
        passive="vflalgorithms.apfed.passive:APFedClient",
        reference="vflalgorithms.apfed.reference:ReferenceAPFed",
        defaults=_WEIGHTS,
        check=_check_weights,
    )
)
SPEC_C = register(
    AlgorithmSpec(
        name=APFED_C,
        active="vflalgorithms.apfed.active:APFedCServer",
        passive="vflalgorithms.apfed.passive:APFedCClient",
        reference="vflalgorithms.apfed.reference:ReferenceAPFed",
        # APFed-C adds the temperature of its contrastive loss (Eq. 14).
        # The paper gives no value. The authors' code uses 1.0, but on a 64-wide projection head and a
        # two-sided loss, which this Eq. 14 lacks; here 1.0 learnt worse (docs/explanation/algorithms.md).
        defaults={**_WEIGHTS, "temperature": 0.5},
        check=_check_contrastive,
    )
)
