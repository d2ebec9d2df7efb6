"""Find a party's private values in log text: its row IDs, its feature values, and anything printed like a tensor.

No log line, at any level, may carry a tensor value, a sample ID or a feature value
(``docs/explanation/security.md``). A test cannot know every way a value might be printed, so it looks for
each party's own values in the forms Python, numpy and torch print them, and for the shapes any
printed array takes (``array(``, ``tensor(``, a run of decimals), which catches the tensors a
party computes (embeddings, gradients) without knowing them in advance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from vflcore.data.tables import PartyTable

__all__ = ["Leak", "PartySecrets", "find_leaks", "id_forms", "party_secrets", "printed_forms"]

#: A decimal number as Python, numpy or torch prints one (``0.25``, ``-1.5e-07``, ``731.2458``).
_DECIMAL = r"[-+]?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?"
#: Three decimals in a row, separated only by commas and spaces: a printed array or list.
#: JSON fields (``"loss": 0.5, "auc": 0.7``) never match, since a key stands between values.
_ARRAY_RUN = re.compile(rf"{_DECIMAL}(?:[,\s]+{_DECIMAL}){{2,}}")
#: What numpy's and torch's reprs start with.
_ARRAY_REPRS = ("array(", "tensor(", "Parameter containing")


@dataclass(frozen=True)
class PartySecrets:
    """What one party must never see in a log: its IDs, and each feature value as it might be printed."""

    party: int
    ids: frozenset[str]
    values: frozenset[str]


@dataclass(frozen=True)
class Leak:
    """One log line that shows a private value, and what it showed."""

    source: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.what}"


def printed_forms(value: float) -> set[str]:
    """How a float32 feature value reads when printed: numpy's shortest form, the float64 repr, and torch's 4 decimals.

    Use values with at least 7 significant digits (e.g. 100 to 1000): shorter forms would also
    match numbers that legitimately appear in logs (losses, seconds).
    """
    single = np.float32(value)
    return {str(single), repr(float(single)), f"{float(single):.4f}"}


def party_secrets(party: int, table: PartyTable) -> PartySecrets:
    """The IDs and printed feature values of ``table`` (a party's own CSV, as ``read_party_csv`` loads it)."""
    values: set[str] = set()
    for value in np.asarray(table.features, dtype=np.float32).reshape(-1).tolist():
        values |= printed_forms(value)
    return PartySecrets(party, frozenset(str(i) for i in table.ids.tolist()), frozenset(values))


def id_forms(party_id: str) -> set[str]:
    """How an ID reads in a log line: as it is, and as the JSON log writes it (``müller`` as ``m\\u00fcller``).

    JSON escapes non-ASCII letters, quotes and backslashes, so a scan for the plain ID alone would
    miss a non-ASCII ID that leaked into a JSON log.
    """
    return {party_id, json.dumps(party_id)[1:-1]}


def find_leaks(lines: Iterable[str], secrets: Iterable[PartySecrets], source: str) -> list[Leak]:
    """Every line of ``lines`` (one log) holding an ID (any of its ``id_forms``), a feature value or a printed array."""
    parties = list(secrets)
    ids = [(p.party, i, form) for p in parties for i in p.ids for form in id_forms(i)]
    values = {value: p.party for p in parties for value in p.values}
    # one pattern for every printed value, bounded so that 731.2458 does not match inside 1731.24589
    pattern = re.compile(r"(?<![\d.])(" + "|".join(map(re.escape, sorted(values, key=len, reverse=True))) + r")")
    leaks: list[Leak] = []
    for number, line in enumerate(lines, start=1):
        found: list[str] = []
        found += [f"party {party}'s ID {i!r}" for party, i, form in ids if form in line]
        if values:
            found += [f"party {values[m]}'s feature value {m}" for m in pattern.findall(line)]
        found += [f"a printed array ({r!r})" for r in _ARRAY_REPRS if r in line]
        found += [f"a run of numbers {m.group(0)[:60]!r}" for m in _ARRAY_RUN.finditer(line)]
        leaks += [Leak(source, number, what) for what in found]
    return leaks
