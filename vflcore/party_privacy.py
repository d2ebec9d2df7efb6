"""A passive party's own ``[privacy]`` table: the protection it requires of every job, whatever the server asks.

The job's ``[privacy]`` table (``vflcore.job.privacy``) is written by the job's owner, on the active
party's side. A passive party whose features must not leave unprotected cannot rely on that: a
server could submit a job with the embedding noise switched off. So the party's own config (the
``vfl-client`` TOML file, or ``PassiveParty(privacy=...)`` in the SDK) states a floor, and the party
compares every job with it at Join. A job below the floor is refused, with a message that names
the party's key, the job's key and both values, so the job's owner knows what to change.

The party refuses rather than silently applying more noise than the job says: the job's record
then always states what every party really applied, which is what the active party trains against,
what the operator audits, and what the privacy bench reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vflcore.job.privacy import PrivacySpec
from vflcore.settings import Section, at_least, check_declared, read_settings, refuse_unknown, setting, table_keys

#: A floor of 0 requires nothing; a negative one would mean nothing.
_at_least_zero = at_least(0, "give a number, at least 0 (0: no requirement)")


@dataclass(frozen=True)
class PartyPrivacy:
    """What this party requires of a job before it sends anything derived from its features; nothing by default."""

    #: The smallest ``[privacy] embedding_noise_multiplier`` a job may ask for (0: no requirement).
    #: Above 0, the job must also clip (``embedding_clip`` > 0), or the noise would have no scale.
    min_embedding_noise_multiplier: float = field(default=0.0, metadata=setting("privacy", check=_at_least_zero))
    #: Where the requirement was read from, for the refusal's message: the config file, or the SDK call.
    source: str = "PassiveParty(privacy=...)"

    def __post_init__(self) -> None:
        check_declared(self, self.source)


def party_privacy_keys() -> tuple[str, ...]:
    """Every key a party's ``[privacy]`` table may hold."""
    return table_keys(PartyPrivacy, "privacy")


def party_privacy_from_table(table: Mapping[str, Any], source: str = "this party's config") -> PartyPrivacy:
    """A party config's ``[privacy]`` table, checked; a ConfigError names the file and the key."""
    sec = Section({"privacy": table}, "privacy", source)
    refuse_unknown(sec, party_privacy_keys(), what="; the job's own settings go in the job file's [privacy] table")
    return PartyPrivacy(**read_settings(PartyPrivacy, {"privacy": table}, source), source=source)


def refusal(required: PartyPrivacy, job: PrivacySpec, party: int) -> str | None:
    """Why this party refuses a job with ``job``'s privacy settings, naming the keys; None if it accepts it."""
    floor = required.min_embedding_noise_multiplier
    if floor <= 0:
        return None
    if job.embedding_noise_multiplier < floor:
        return (
            f"party {party} refuses the job: its config ({required.source}) [privacy] "
            f"min_embedding_noise_multiplier = {floor:g} requires embedding noise; the job's [privacy] "
            f"embedding_noise_multiplier is {job.embedding_noise_multiplier:g}; ask the job's owner to set it "
            f"to at least {floor:g} (with embedding_clip > 0)"
        )
    if job.embedding_clip <= 0:
        return (
            f"party {party} refuses the job: its config ({required.source}) [privacy] "
            f"min_embedding_noise_multiplier = {floor:g} requires clipped, noised embeddings; the job's "
            f"[privacy] embedding_clip is {job.embedding_clip:g}; ask the job's owner to set it above 0"
        )
    return None


__all__ = ["PartyPrivacy", "party_privacy_from_table", "party_privacy_keys", "refusal"]
