"""Artificial client delays, from the job's config: the thesis's two scenarios (002 §5.4.2).

- ``round_robin``: one passive party at a time is asleep. Time is cut into slots of
  ``delay_s`` seconds; slot n belongs to party ``parties[n mod M]``, which, when it is
  about to send during its own slot, sleeps until the slot ends. The parties need no messages
  to agree on whose turn it is, only clocks that agree to well under ``delay_s`` (the same host
  in tests and benchmarks; NTP across hosts).
- ``random``: before each step, each party sleeps ``delay_s`` with probability
  ``delay_probability``, from its own seeded generator.

``parties`` are ``delayed_parties`` if the job names some, else every passive party; with one
delayed party, round-robin makes it sleep ``delay_s`` before every step (one slow client).

Synchronous training waits for the slowest party at every step; asynchronous training
(``async``) keeps the others going. The delay runs on the party itself, in front of its upload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vflalgorithms.options import is_number, one_of, positive_numbers
from vflcore.errors import ConfigError
from vflcore.job.spec import JobSpec

MODES = ("none", "round_robin", "random")

#: The delay options of the algorithms that can simulate slow parties (SplitNN, async).
DELAY_DEFAULTS: Mapping[str, Any] = {"delay": "none", "delay_s": 0.2, "delay_probability": 0.25, "delayed_parties": []}


def check_delay(options: Mapping[str, Any]) -> None:
    """The delay options are usable: a mode, a positive slot, a probability, a list of party ids."""
    positive_numbers(options, "delay_s")
    probability = options["delay_probability"]
    if not (is_number(probability) and 0 <= probability <= 1):
        raise ConfigError(f"[algorithm] delay_probability must be in [0, 1], got {probability!r}")
    delayed = options["delayed_parties"]
    if not isinstance(delayed, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in delayed):
        raise ConfigError(f"[algorithm] delayed_parties must be a list of party ids, got {delayed!r}")
    one_of(options, "delay", MODES)


class Delay:
    """Sleeps a party's process before a step, as the job's ``[algorithm] delay`` says."""

    def __init__(
        self,
        job: JobSpec,
        party: int,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        options = {**DELAY_DEFAULTS, **job.algorithm_options}
        self.mode = str(options.get("delay", "none"))
        self.seconds = float(options.get("delay_s", 0.0))
        self.probability = float(options.get("delay_probability", 0.0))
        self._parties = tuple(options.get("delayed_parties") or job.passive_parties)
        self._party = party
        self._rng = np.random.default_rng([job.seed, party])
        self._clock, self._sleep = clock, sleep

    def before_step(self) -> float:
        """Sleep if this party is delayed now; returns the seconds slept."""
        if self._party not in self._parties:
            return 0.0
        if self.mode == "random":
            if self._rng.random() < self.probability:
                self._sleep(self.seconds)
                return self.seconds
            return 0.0
        if self.mode == "round_robin" and self.seconds > 0:
            now = self._clock()
            slot = int(now // self.seconds)
            if len(self._parties) == 1 or self._parties[slot % len(self._parties)] == self._party:
                wait = (slot + 1) * self.seconds - now
                self._sleep(wait)
                return wait
        return 0.0
