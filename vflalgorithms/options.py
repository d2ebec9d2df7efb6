"""An algorithm's ``[algorithm]`` options: a job's, completed with their defaults, and the checks specs share.

The server's config sets an algorithm's options; they reach every passive party inside the job,
so both halves read the same values (``job_options``). An unknown key or a bad value is refused
when the server starts, naming the key, rather than halfway through training. The checks below
are those several algorithms' ``spec.py`` share, each naming the ``[algorithm]`` key it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vflalgorithms.registry import algorithm_spec
from vflcore.errors import ConfigError
from vflcore.job.spec import JobSpec


def is_number(value: Any) -> bool:
    """A real number, and not a bool (TOML and JSON booleans are ints to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def whole_numbers(options: Mapping[str, Any], *keys: str) -> None:
    """Each of ``keys`` is a whole number of at least 1."""
    for key in keys:
        value = options[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"[algorithm] {key} must be a whole number of at least 1, got {value!r}")


def positive_numbers(options: Mapping[str, Any], *keys: str) -> None:
    """Each of ``keys`` is a number above 0."""
    for key in keys:
        value = options[key]
        if not is_number(value) or not value > 0:
            raise ConfigError(f"[algorithm] {key} must be a positive number, got {value!r}")


def one_of(options: Mapping[str, Any], key: str, choices: tuple[str, ...]) -> None:
    """``key`` is one of ``choices``."""
    if options[key] not in choices:
        raise ConfigError(f"[algorithm] {key} = {options[key]!r}; choose {', '.join(choices[:-1])} or {choices[-1]}")


def party_ids(mapping: Any) -> bool:
    """Whether every key of ``mapping`` is a party id as TOML writes it ("2")."""
    return isinstance(mapping, Mapping) and all(str(k).isdigit() for k in mapping)


def local_steps_and_rho(options: Mapping[str, Any]) -> None:
    """VIMADMM and VIMADMM-J: τ local steps and the ADMM penalty ρ."""
    whole_numbers(options, "local_steps")
    positive_numbers(options, "rho")


def algorithm_options(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` checked against algorithm ``name``'s options and completed with their defaults."""
    return algorithm_spec(name).options(given)


def job_options(job: JobSpec) -> dict[str, Any]:
    """The job's algorithm options, completed with their defaults: what both halves read."""
    return algorithm_options(job.algorithm, job.algorithm_options)


__all__ = [
    "algorithm_options",
    "is_number",
    "job_options",
    "local_steps_and_rho",
    "one_of",
    "party_ids",
    "positive_numbers",
    "whole_numbers",
]
