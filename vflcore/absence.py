"""How the service words a party that did not connect, join or come back in time.

One wording, wherever such a failure is told: the job's error in the job store (what
``vfl-jobs`` shows) and the ``Finish`` message every passive party of the job logs are made by
the same function here, so an operator who reads both sees the same limit in the same words.
The limit printed is the configured one (``120 s``), never the time that was left of it when a
wait began (``119.992 s``): every limit here is counted from one moment the message names.
"""

from __future__ import annotations

from vflcore.errors import PartyUnavailable

#: Where the join limit is set, for the messages: the job file's own, else the server's.
JOIN_SETTING = "[job] join_timeout_s, default [server] join_timeout_s"
#: Where the limit on a lost party is set.
PARTY_SETTING = "[server] party_timeout_s"


def did_not_connect(party: int, limit_s: float) -> PartyUnavailable:
    """A queued job's party whose daemon was not connected for ``limit_s`` while the job was queued."""
    return PartyUnavailable(
        party,
        f"its daemon was not connected to the server for {limit_s:g} s ({JOIN_SETTING}) while the job was "
        f"queued. Start vfl-client --party {party}, then submit the job again",
    )


def did_not_join(missing: list[int], limit_s: float) -> PartyUnavailable:
    """A started job whose parties ``missing`` did not join within ``limit_s`` of its start."""
    return PartyUnavailable(
        missing[0], f"it did not join within {limit_s:g} s of the job's start ({JOIN_SETTING}; missing: {missing})"
    )


def did_not_come_back(party: int, limit_s: float, lost_because: str, saved: str) -> PartyUnavailable:
    """A paused job's lost party that was not back within ``limit_s`` of the loss.

    ``lost_because`` is the loss's reason (``its connection to the server closed``), ``saved``
    the newest checkpoint the server holds, in words.
    """
    return PartyUnavailable(
        party,
        f"it did not come back within {limit_s:g} s ({PARTY_SETTING}, counted from the loss) after {lost_because}; "
        f"{saved}. Start its daemon, then submit the job again under a new id",
    )
