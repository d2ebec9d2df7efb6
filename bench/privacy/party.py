"""A passive party that records what it legitimately sees, for the privacy bench's attack probes.

    python -m bench.privacy.party --config party2.toml --party 2 --record <dir>

The same daemon as ``vfl-client`` (``vflclient.PartyDaemon``: connect over mTLS, take every job
offered, reconnect when lost) with one difference: each job's ``PassiveParty`` runs with a
``LinkRecorder``, which keeps what the party sends and receives, and its trained bottom model's
embeddings, under ``<dir>/<job_id>/party-<N>``. A curious party would record exactly this; the
probes (``vfltesting.privacy_probe``) then attack the recording, never the other side's internals.

It is a separate OS process, as a real party is, so the bench measures what crosses a real mTLS
link between processes and nothing shared in memory.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from vflclient import Connection, PassiveParty
from vflclient._daemon import PartyDaemon
from vflcore.errors import ConfigError, DataError, TlsConfigError
from vflcore.job.spec import Offer
from vflcore.runtime import daemon
from vflcore.runtime.config import ClientConfig, client_config_from, load_toml
from vflprivacy.recording import LinkRecorder


class RecordingParty(PartyDaemon):
    """``PartyDaemon`` whose every job is recorded under ``record/<job_id>/party-<N>``."""

    def __init__(self, config: ClientConfig, connect: Callable[[threading.Event], Connection], record: Path) -> None:
        super().__init__(config, connect)
        self.record = record

    def _party_for(self, connection: Connection, offer: Offer) -> PassiveParty:
        """The daemon's own party for the offer (its dataset, model and privacy checks), with a recorder.

        Set on the party the daemon built rather than built again here, so that whatever the daemon
        gives its parties (its own ``[privacy]`` floor, say) the recording party has too.
        """
        party = super()._party_for(connection, offer)
        party.recorder = LinkRecorder(self.record / offer.job.job_id / f"party-{self.party}")
        return party


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.privacy.party", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="this party's client TOML (as vfl-client's)")
    parser.add_argument("--party", type=int, required=True, help="this party's id (>= 2)")
    parser.add_argument("--record", type=Path, required=True, help="where each job's recording goes")
    daemon.add_logging_flags(parser)
    args = parser.parse_args(argv)
    daemon.setup_logging(args)

    def connect(stop: threading.Event) -> Connection:
        return Connection(
            config.settings.server,
            config.party,
            tls=config.tls,
            connect_timeout_s=min(config.settings.connect_timeout_s, 10.0),
            stop=stop,
            fail_fast=True,
        )

    try:
        config = client_config_from(load_toml(args.config, "client config"), args.config, party=args.party)
        party = RecordingParty(config, connect, args.record)  # imports its [model] factory, if it names one
    except (ConfigError, DataError) as exc:
        print(f"privacy_party: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    structlog.contextvars.bind_contextvars(party=config.party)
    daemon.prepare_compute(config.settings.torch_threads)
    daemon.ShutdownSignals(party.stop).install()
    try:
        party.run_forever()
    except TlsConfigError as exc:
        print(f"privacy_party: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    return daemon.EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
