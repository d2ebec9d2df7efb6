"""A passive party's daemon: stay connected to the server and take part in every job that names it.

``vfl-client`` runs one ``PartyDaemon`` until SIGINT or SIGTERM. Its loop:

1. Connect. An unreachable server (not started yet, restarting, network down) is retried with
   exponential backoff and jitter (``Backoff``): from ``retry_initial_s`` (0.1 s by default),
   about once a second for the first 30 s (a restart), then up to ``retry_max_s`` (60 s); each
   retry is logged with the attempt and the wait.
2. Ask for the next job (``Connection.next_job``, a long poll). The offer names the dataset this
   party is to use, by the name in this party's own config.
3. Load that dataset and take part (``PassiveParty.run``). A dataset this party lacks is reported
   to the server, which fails the job before PSI with a message naming the party and the dataset.
4. Whatever the job's outcome (finished, failed, cancelled, paused because another party was
   lost), drop its state, keep its checkpoints, and go back to 2. A lost connection goes back
   to 1. A paused job is offered again: joining it with the checkpoints this party holds lets
   the server resume it from the newest checkpoint every party holds.

``once=True`` is the one-shot party of old: one job, errors raised to the caller, no retries.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from vflalgorithms.contexts import ModelFactory
from vflclient._connection import Connection
from vflclient._passive_party import PassiveParty, RunResult
from vflcore.data.tables import PartyTable, read_party_csv
from vflcore.errors import ConfigError, DataError, PermissionDenied, ServerUnavailable, TlsConfigError, VflError
from vflcore.job.spec import Offer
from vflcore.ml.models import load_factory
from vflcore.runtime.config import (
    RESTART_RETRY_S,
    RESTART_WINDOW_S,
    RETRY_INITIAL_S,
    RETRY_MAX_S,
    ClientConfig,
    dataset_named,
)

log = structlog.get_logger(__name__)


@dataclass
class Backoff:
    """Exponential backoff with jitter, fast while the loss may be a restart.

    Each wait is drawn from [d/2, d]. d starts at ``initial_s`` and doubles after every try, but
    stays at most ``restart_cap_s`` until ``restart_window_s`` of waiting has passed, and at most
    ``cap_s`` after that. A server restart takes seconds: a party that has lost its server tries
    about once a second for the first half minute, so a resumed job waits well under a second for
    it (a plain doubling from 0.1 s was at 3.2 s waits five seconds in, and left parties 2.4 s
    on average behind a server that was back after 3 to 8 s). Past the window it is a real
    outage, and the waits grow to ``cap_s``, so that a long one costs few tries and few log lines.

    The jitter keeps many parties that lost the same server from reconnecting in lockstep; the
    lower half keeps the doubling visible in the logs. ``initial_s`` and ``cap_s`` are the config's
    ``[client] retry_initial_s`` and ``retry_max_s``.
    """

    initial_s: float = RETRY_INITIAL_S
    cap_s: float = RETRY_MAX_S
    restart_cap_s: float = RESTART_RETRY_S
    restart_window_s: float = RESTART_WINDOW_S
    attempt: int = 0
    rng: random.Random | None = None
    _ceiling: float = field(default=0.0, init=False, repr=False)  # the next wait's d; 0: initial_s
    _waited_s: float = field(default=0.0, init=False, repr=False)  # waited since the last reset

    def next_wait(self) -> float:
        limit = self.cap_s if self._waited_s >= self.restart_window_s else min(self.cap_s, self.restart_cap_s)
        ceiling = min(limit, self._ceiling or self.initial_s)
        self._ceiling = ceiling * 2.0
        self.attempt += 1
        wait = ceiling * (self.rng or random).uniform(0.5, 1.0)
        self._waited_s += wait
        return wait

    def reset(self) -> None:
        self.attempt, self._ceiling, self._waited_s = 0, 0.0, 0.0


class PartyDaemon:
    """One passive party, job after job, until ``stop``.

    ``config`` is the party's whole config, as ``vfl-client`` builds it from its file and flags:
    its id, its datasets and models, its ``[privacy]`` and its settings, which each job's
    ``PassiveParty`` is handed. ``connect(stop_event)`` opens a connection to the server that a stop
    ends at once: how (TLS or not, its timeouts, a test's refusal) is the caller's, not a setting.
    """

    #: How long one NextJob poll waits for an offer before it asks again.
    offer_wait_s = 30.0

    def __init__(self, config: ClientConfig, connect: Callable[[threading.Event], Connection]) -> None:
        self.config = config
        self.party = config.party
        self._connect = connect
        #: ``[model] factory``, imported now: one that cannot be imported is refused at start, not at a job.
        self.model_factory = self._load_factory(config.settings.model_factory, "[model] factory")
        self.backoff = Backoff(config.settings.retry_initial_s, config.settings.retry_max_s)
        self.stop_event = threading.Event()
        #: The jobs this daemon trained to their end or saw end; a served model's job is one while it serves.
        self._jobs_done: set[str] = set()
        #: The job a stop interrupted before this party trained it to its end (None: none was).
        self.stopped_during: str | None = None
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._tables: dict[tuple[str, str], tuple[float, PartyTable]] = {}

    @property
    def jobs_done(self) -> int:
        """How many jobs this daemon took part in to their end, or trained to the end and then served."""
        return len(self._jobs_done)

    def stop(self) -> None:
        """Leave at once: the open calls are cancelled, the running job (if any) loses this party."""
        self.stop_event.set()
        with self._lock:
            connection = self._connection
        if connection is not None:
            connection.close()

    # ---- the loops ----------------------------------------------------------------------------

    def run_forever(self) -> None:
        """Take part in every job that names this party until ``stop``; reconnect whenever needed."""
        while not self.stop_event.is_set():
            try:
                with self._open() as connection, connection.closing_is_stopping():
                    self.backoff.reset()
                    log.info("connected", server=connection.address)
                    while not self.stop_event.is_set():
                        offer = connection.next_job(self.offer_wait_s)
                        if offer is not None:
                            self._take_part(connection, offer)
            except TlsConfigError:
                raise  # this party's own files: retrying cannot help; vfl-client exits 2
            except (ServerUnavailable, PermissionDenied) as exc:
                # PermissionDenied too: the server's operator may fix its side; say so every time.
                self._wait_before_retry(exc)
            except VflError as exc:
                if self.stop_event.is_set():
                    break
                log.warning("connection_lost", error=str(exc))
                self._wait_before_retry(exc)

    def run_once(self) -> RunResult:
        """Take part in the next job that names this party; errors are raised, nothing is retried."""
        with self._open() as connection, connection.closing_is_stopping():
            while True:
                offer = connection.next_job(self.offer_wait_s)
                if self.stop_event.is_set():
                    raise ServerUnavailable("stopped before a job came")
                if offer is not None:
                    return self._party_for(connection, offer).run(connection, job_id=offer.job.job_id)

    # ---- one job ------------------------------------------------------------------------------

    def _take_part(self, connection: Connection, offer: Offer) -> None:
        job = offer.job
        structlog.contextvars.bind_contextvars(job=job.job_id)
        try:
            try:
                party = self._party_for(connection, offer)
            except (ConfigError, DataError):
                return  # reported: the job fails before PSI; this party waits for the next
            try:
                result = party.run(connection, job_id=job.job_id)
            except BaseException:
                if self.stop_event.is_set() and not party.trained:
                    self.stopped_during = job.job_id
                raise
            finally:
                # Trained to its last epoch: done, though its model may serve (so run not return)
                # until this daemon stops. A rejoin to serve it again trains nothing: not counted twice.
                if party.trained:
                    self._jobs_done.add(job.job_id)
            if result.rejoin:  # the server offers it again once it can resume from a checkpoint
                log.warning("job_paused", message=result.message, epochs=result.epochs_trained)
                return
            self._jobs_done.add(job.job_id)
            log.info("job_ended", success=result.success, message=result.message, epochs=result.epochs_trained)
        except ServerUnavailable:
            raise  # the connection is gone: reconnect
        except VflError as exc:  # the job failed or was cancelled; this party is ready for the next
            if self.stop_event.is_set():
                raise
            log.warning("job_ended", success=False, message=str(exc))
        finally:
            structlog.contextvars.unbind_contextvars("job", "round")

    def _party_for(self, connection: Connection, offer: Offer) -> PassiveParty:
        """A fresh party for the offered job, on the named dataset and model; nothing of an earlier job is kept.

        A dataset or model name this party lacks (or a table it cannot read) is reported to the
        server, which then fails the job before PSI naming the party and the name, and the error
        is raised here too.
        """
        job = offer.job
        try:
            table = self._table(offer.dataset)
            factory = self._factory(offer.model)
        except (ConfigError, DataError) as exc:
            log.error("job_refused", job=job.job_id, dataset=offer.dataset, model=offer.model, error=str(exc))
            connection.report_failure(job.job_id, 0, str(exc))
            raise
        return PassiveParty(self.party, table, self.config.settings, model_factory=factory, privacy=self.config.privacy)

    def _factory(self, name: str) -> ModelFactory | None:
        """The model factory the job names (a ``[models]`` name of this party's config), or the default."""
        if not name:
            return self.model_factory
        spec = self.config.models.get(name)
        if spec is None:
            have = ", ".join(sorted(self.config.models)) or "none"
            raise ConfigError(
                f"party {self.party}: the job asks for model {name!r}, which this party's [models] table does not "
                f'name (it has: {have}); add {name} = "package.module:function" to its config'
            )
        return self._load_factory(spec, f"[models] {name}")

    def _load_factory(self, spec: str | None, where: str) -> ModelFactory | None:
        """The factory ``spec`` names (None: none); a ConfigError naming ``where`` if it cannot be imported."""
        if spec is None:
            return None
        try:
            return load_factory(spec)
        except ValueError as exc:
            raise ConfigError(f"party {self.party}: {where}: {exc}") from None

    def check_datasets(self) -> None:
        """Read every dataset of this party's config once; DataError names the file at fault."""
        for name in self.config.datasets:
            self._table(name)

    def _table(self, name: str) -> PartyTable:
        """The dataset ``name`` from this party's config, read again only if its file changed."""
        source = dataset_named(self.config.datasets, name, f"party {self.party}")
        try:
            stamp = source.path.stat().st_mtime
        except OSError:
            raise DataError(f"party {self.party}: dataset {name!r}: {source.path} cannot be read") from None
        # Keyed by the file, not the name: two dataset names for one file share one table in
        # memory (at 10M x 30, each copy is 1.2 GB).
        key = (str(source.path.resolve()), source.id_column)
        cached = self._tables.get(key)
        if cached is None or cached[0] != stamp:
            self._tables.pop(key, None)  # the old table goes before the new one is read
            cached = (stamp, read_party_csv(source.path, id_column=source.id_column))
            self._tables[key] = cached
        return cached[1]

    # ---- connecting ---------------------------------------------------------------------------

    def _open(self) -> Connection:
        connection = self._connect(self.stop_event)
        with self._lock:
            self._connection = connection
        if self.stop_event.is_set():
            connection.close()
            raise ServerUnavailable("stopped")
        return connection

    def _wait_before_retry(self, exc: VflError) -> None:
        if self.stop_event.is_set():
            return
        wait = self.backoff.next_wait()
        log.warning("server_unreachable", attempt=self.backoff.attempt, retry_in_s=round(wait, 2), error=str(exc))
        self.stop_event.wait(wait)
