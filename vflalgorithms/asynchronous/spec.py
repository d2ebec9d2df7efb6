"""Asynchronous VFL (002 §5.4.2): the server steps on whichever embedding arrives, within a staleness bound."""

from collections.abc import Mapping
from typing import Any

from vflalgorithms.delays import DELAY_DEFAULTS, check_delay
from vflalgorithms.options import whole_numbers
from vflalgorithms.registry import AlgorithmSpec, register

#: Every training row's embedding, once, before the first epoch (the initial full pass).
WARMUP_EMBEDDING = "warmup/embedding"


def _check(options: Mapping[str, Any]) -> None:
    whole_numbers(options, "max_staleness")
    check_delay(options)


SPEC = register(
    AlgorithmSpec(
        name="async",
        active="vflalgorithms.asynchronous.active:AsyncServer",
        passive="vflalgorithms.asynchronous.passive:AsyncClient",
        # How many batches a party may run ahead of the slowest one, and the delay scenarios.
        defaults={**DELAY_DEFAULTS, "max_staleness": 5},
        check=_check,
    )
)
