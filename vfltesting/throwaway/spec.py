"""The throwaway algorithm's spec: its name, its one option, its tensor names, both halves.

Nothing in ``vflcore``, ``vflalgorithms``, ``vflserver`` or ``vflclient`` names it: importing
this module registers it, and the daemons find it by the name the job carries.
"""

from collections.abc import Mapping
from typing import Any

from vflalgorithms.options import positive_numbers
from vflalgorithms.registry import AlgorithmSpec, register
from vfltesting.throwaway.halves import LinearProbeClient, LinearProbeServer

NAME = "throwaway_linear_probe"


def _check(options: Mapping[str, Any]) -> None:
    positive_numbers(options, "gradient_scale")


SPEC = register(
    AlgorithmSpec(
        name=NAME,
        active=LinearProbeServer,
        passive=LinearProbeClient,
        defaults={"gradient_scale": 1.0},
        check=_check,
    )
)
