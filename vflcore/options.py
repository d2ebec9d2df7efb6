"""Each algorithm's own settings (the ``[algorithm]`` table of the server config), checked once.

The server's config sets them; they reach every passive party inside the job, so both halves of
an algorithm read the same values through ``algorithm_options``. An unknown key or a bad value
is refused when the server starts, naming the key, rather than halfway through training.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflcore.errors import ConfigError

#: Per algorithm: each option's default. An algorithm missing here takes no options.
DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "splitnn": {},
    # Q, the local updates per communication round (002 §4.3.1); Q = 1 is SplitNN exactly.
    "fedbcd": {"local_steps": 5},
    "vimsgd": {},
    # ρ, the ADMM penalty, and τ, the local SGD steps a client takes on Eq. 10 per round (004 §3.2).
    "vimadmm": {"rho": 1.0, "local_steps": 10},
}


def algorithm_options(algorithm: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` checked against ``algorithm``'s options and completed with their defaults."""
    known = DEFAULTS.get(algorithm, {})
    unknown = sorted(set(given) - set(known))
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise ConfigError(f"[algorithm] {unknown[0]} is not an option of {algorithm!r} (its options: {allowed})")
    options = {**known, **given}
    steps = options.get("local_steps")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise ConfigError(f"[algorithm] local_steps must be a whole number of at least 1, got {steps!r}")
    rho = options.get("rho")
    if rho is not None and (not isinstance(rho, int | float) or isinstance(rho, bool) or not rho > 0):
        raise ConfigError(f"[algorithm] rho must be a positive number, got {rho!r}")
    return options
