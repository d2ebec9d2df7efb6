"""Daemon configuration: TOML files, with command-line flags laid on top.

A relative path in a config file is resolved against the file's own folder, so a config
copied to another host together with its certs and data keeps working. Every error names the
file and the key. Each setting is declared once: what every party's daemon has in
``PartySettings``, the server's own in ``ServerSettings`` and a passive party's in
``ClientSettings``, each field with its type, default, table, key and check.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from vflcore.errors import ConfigError
from vflcore.party_privacy import PartyPrivacy, party_privacy_from_table
from vflcore.runtime.compute import COMPUTE_KEYS, ENGINES, RAY_UNSET, ComputeEngine, engine_setting, ray_address_setting
from vflcore.security.tls import TlsFiles
from vflcore.settings import (
    OWN_TABLE,
    Section,
    Tables,
    at_least_one,
    check_declared,
    one_of,
    optional,
    positive,
    read_settings,
    refuse_unknown,
    refuse_unknown_tables,
    setting,
    tables_of,
    whole,
)

DEFAULT_PORT = 50051

#: A passive daemon's reconnect backoff (``vflclient._daemon.Backoff``): the first wait, doubled
#: each try up to the cap (with jitter), but at most ``RESTART_RETRY_S`` during the first
#: ``RESTART_WINDOW_S`` of waiting. The usual loss is a server restart, which takes seconds: a wait
#: that has grown to several seconds by the time the server is back is time the resumed job waits
#: for nothing (issue 27: 10-11 s from a server restart to training, with a first wait of 0.5 s).
RETRY_INITIAL_S = 0.1
RETRY_MAX_S = 60.0
RESTART_RETRY_S = 1.0
RESTART_WINDOW_S = 30.0


@dataclass(frozen=True)
class DataSource:
    """Where a party's table is and which columns mean what."""

    path: Path
    id_column: str = "id"
    label_column: str | None = None
    #: The active party's file of test IDs, one per line (``vflcore.data.held_out``): the job's
    #: held-out rows are these, not a seeded ``test_fraction`` of the aligned rows (None: that).
    held_out_ids: Path | None = None


#: The dataset a job uses when it names none, and the name a config's ``[data]`` table is known by.
DEFAULT_DATASET = "default"


#: ``[psi] chunk_ids`` when a server's config does not set it: items per chunk of PSI's exchange
#: (``vflcore.psi.chunks``), about 3 s of one core's X25519 work and 2 MiB of points, so a restart
#: redoes little and the stream's tail is short. Declared with the settings it is the default of.
DEFAULT_CHUNK_IDS = 65_536
#: ``[psi] x25519``'s values (``vflcore.psi.x25519`` says what each does on a host).
X25519_SETTINGS = ("auto", "multibuffer", "openssl")


def load_toml(path: Path, what: str = "config file") -> dict[str, Any]:
    """Read a TOML file (a ``what``), turning every failure into a ConfigError naming the file."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {path} is not valid TOML: {exc}") from exc


#: ``keep_checkpoints`` in ``[server]`` or ``[client]`` (``PartySettings``): a whole number of epochs, at least 1.
_keep_checkpoints = whole(1, "a whole number of epochs, at least 1 (the newest checkpoint is always kept)")

#: ``[psi] workers``: at least 1, or left out for one per core.
_psi_workers = optional(whole(1, "a whole number, at least 1 (or leave it out: one per CPU core)"))

#: ``[psi] x25519``: "auto", "multibuffer" or "openssl" (``vflcore.psi.x25519``). What this host can
#: run is checked at start (``vflcore.psi.x25519.choose_at_start``), not here.
_x25519 = one_of(X25519_SETTINGS)


def _device(value: Any) -> str | None:
    """``[compute] device``: "cpu", "cuda" or "cuda:N"; whether the host has it is checked at start."""
    kind, colon, index = value.partition(":") if isinstance(value, str) else ("", "", "")
    if kind in ("cpu", "cuda") and (not colon or (kind == "cuda" and index.isdigit())):
        return None
    return '; give "cpu", "cuda" or "cuda:N" (N = 0, 1, ...)'


def _engine(value: Any) -> str | None:
    """``[compute] engine``: one of ``ENGINES`` (that Ray is installed is the reader's to check: a host's fact)."""
    return None if value in ENGINES else "; give " + " or ".join(f'"{name}"' for name in ENGINES)


@dataclass(frozen=True)
class PartySettings:
    """The settings every party's daemon has, the server's and a passive party's alike, declared once.

    Where its files go, how many checkpoints it keeps, and where it computes: its threads, its
    device, and PSI's curve arithmetic. ``run_dir``, ``keep_checkpoints`` and ``torch_threads`` sit
    in the daemon's own table (``OWN_TABLE``): ``[server]`` in ``ServerSettings``, ``[client]`` in
    ``ClientSettings``; the others in ``[psi]`` and ``[compute]``, the same in both files.
    """

    #: Checkpoints, reports and alignment results go to ``<run_dir>/<job_id>/party-<N>/``.
    run_dir: Path = field(default=Path("runs"), metadata=setting(OWN_TABLE))
    #: How many epochs' checkpoints this party keeps per job (the newest).
    keep_checkpoints: int = field(default=2, metadata=setting(OWN_TABLE, check=_keep_checkpoints))
    torch_threads: int = field(default=1, metadata=setting(OWN_TABLE, check=at_least_one))
    #: Processes for PSI's curve arithmetic; None: one per core.
    psi_workers: int | None = field(
        default=None, metadata=setting("psi", key="workers", check=_psi_workers, unset="one per CPU core")
    )
    #: Which X25519 PSI runs: Intel's multi-buffer where it can, or OpenSSL's (``vflcore.psi.x25519``).
    psi_x25519: str = field(default="auto", metadata=setting("psi", key="x25519", check=_x25519))
    #: Where this party trains ("cpu", "cuda", "cuda:N"); checked at start.
    device: str = field(default="cpu", metadata=setting("compute", check=_device))
    #: Where PSI's curve arithmetic runs: this host, or the party's Ray cluster (``vflcore.runtime.compute``).
    engine: str = field(default="local", metadata=setting("compute", read=engine_setting, check=_engine))
    ray_address: str | None = field(
        default=None, metadata=setting("compute", read=ray_address_setting, unset=RAY_UNSET)
    )

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def compute_engine(self) -> ComputeEngine:
        return ComputeEngine(self.engine, self.ray_address)


@dataclass(frozen=True)
class ServerSettings(PartySettings):
    """The server's own settings, each declared once: name, type, default, table, key and check.

    ``server_settings_from`` reads every field from its table. The service, the job runner and
    each job's ``ActiveParty`` are handed this one object, and ``tests/unit/vflcore/runtime/test_config.py``
    checks ``docs/reference/configuration.md`` against these declarations (and ``PartySettings``').
    """

    own_table: ClassVar[str] = "server"

    listen: str = field(default=f"127.0.0.1:{DEFAULT_PORT}", metadata=setting("server"))
    #: The job store (SQLite); default: ``jobs.sqlite`` in the run directory (``store_path``).
    store: Path | None = field(default=None, metadata=setting("server", unset="<run_dir>/jobs.sqlite"))
    port_file: Path | None = field(default=None, metadata=setting("server", unset="none"))
    #: How long a job waits for every passive party to join; a job file may set its own.
    join_timeout_s: float = field(default=300.0, metadata=setting("server", check=positive))
    step_timeout_s: float = field(default=300.0, metadata=setting("server", check=positive))
    #: How long a job waits for a lost party to come back before it fails (docs/how-to/party-failures.md).
    party_timeout_s: float = field(default=600.0, metadata=setting("server", check=positive))
    #: A party silent this long (no heartbeat) counts as lost, even if its TCP stream looks open.
    heartbeat_timeout_s: float = field(default=60.0, metadata=setting("server", check=positive))
    #: Calls the federation server runs at once (more get RESOURCE_EXHAUSTED), and per party.
    max_rpcs: int = field(default=64, metadata=setting("server", check=at_least_one))
    max_party_rpcs: int = field(default=16, metadata=setting("server", check=at_least_one))
    #: IDs per chunk of PSI's exchange (``vflcore.psi.chunks``); every passive party is told it.
    psi_chunk_ids: int = field(default=DEFAULT_CHUNK_IDS, metadata=setting("psi", key="chunk_ids", check=at_least_one))
    #: Serve Prometheus metrics on ``metrics_listen``.
    metrics_enabled: bool = field(default=False, metadata=setting("metrics", key="enabled"))
    metrics_listen: str = field(default="127.0.0.1:9464", metadata=setting("metrics", key="listen"))
    #: Serve the operator's console (``vflserver.console``) on ``console_listen``, over mTLS.
    console_enabled: bool = field(default=False, metadata=setting("console", key="enabled"))
    console_listen: str = field(default="127.0.0.1:8443", metadata=setting("console", key="listen"))

    @property
    def store_path(self) -> Path:
        return self.store or self.run_dir / "jobs.sqlite"


def server_settings_from(doc: Mapping[str, Any], source: Path | None = None) -> ServerSettings:
    """Every ``ServerSettings`` field, read from its table by its reader (or its type's), and checked."""
    return ServerSettings(**read_settings(ServerSettings, doc, source))


#: ``[tls]``'s keys, in a server's config and a party's alike (``tls_files``).
TLS_KEYS = ("ca", "cert", "key")
#: The keys of ``[data]`` and of each ``[datasets]`` entry (``DataSource``).
DATA_KEYS = ("path", "id_column", "label_column", "held_out_ids")
#: A server config's job tables: ``vfl-server`` reads them as a job document (``plan_from_document``,
#: which refuses an unknown key in each), or refuses them when there is no ``[job]``; ``[serving]``
#: is read by ``serving_config_from``, which refuses an unknown key. Their keys live in ``vflserver``.
SERVER_JOB_TABLES = ("job", "algorithm", "model", "privacy", "distill", "serving")


def server_tables() -> Tables:
    """Every table a server's config may hold, with the keys of those read here."""
    return {
        **tables_of(ServerSettings),
        "tls": TLS_KEYS,
        "data": DATA_KEYS,
        "datasets": None,
        **dict.fromkeys(SERVER_JOB_TABLES),
    }


def client_tables() -> Tables:
    """Every table a party's config may hold, with its keys (``[datasets]``, ``[models]``: names, checked per entry)."""
    tables = tables_of(ClientSettings, PartyPrivacy)
    return {
        **tables,
        "client": (*tables["client"], "party"),
        "tls": TLS_KEYS,
        "data": DATA_KEYS,
        "datasets": None,
        "models": None,
    }


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``vfl-server`` needs: its identity, its datasets and its settings."""

    tls: TlsFiles | None  # None only with --insecure
    #: The labelled tables jobs may name, by name; ``[data]`` is the one named "default".
    datasets: dict[str, DataSource]
    settings: ServerSettings = field(default_factory=ServerSettings)

    @property
    def data(self) -> DataSource:
        """The ``default`` dataset (the ``[data]`` table); ConfigError if the config has none."""
        return dataset_named(self.datasets, DEFAULT_DATASET, "the server's config")


@dataclass(frozen=True)
class ClientSettings(PartySettings):
    """A passive party's own settings, each declared once, as ``ServerSettings`` are the server's.

    ``client_settings_from`` reads them; ``PartyDaemon`` is handed them inside ``ClientConfig``,
    and each job's ``PassiveParty`` takes this one object (``PassiveParty(party, table, settings)``).
    """

    own_table: ClassVar[str] = "client"

    #: The active party's ``host:port``.
    server: str = field(default=f"127.0.0.1:{DEFAULT_PORT}", metadata=setting("client"))
    #: ``[model] factory``: the bottom model a job that names none gets (``module:function``).
    model_factory: str | None = field(default=None, metadata=setting("model", key="factory", unset="none"))
    heartbeat_s: float = field(default=10.0, metadata=setting("client", check=positive))
    connect_timeout_s: float = field(default=60.0, metadata=setting("client", check=positive))
    #: Reconnecting to an unreachable server: the first wait, doubled each try up to the cap.
    retry_initial_s: float = field(default=RETRY_INITIAL_S, metadata=setting("client", check=positive))
    retry_max_s: float = field(default=RETRY_MAX_S, metadata=setting("client", check=positive))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_backoff(self.retry_initial_s, self.retry_max_s, type(self).__name__)


def client_settings_from(doc: Mapping[str, Any], source: Path | None = None) -> ClientSettings:
    """Every ``ClientSettings`` field, read from its table by its reader (or its type's), and checked."""
    values = read_settings(ClientSettings, doc, source)
    check_backoff(values["retry_initial_s"], values["retry_max_s"], Section(doc, "client", source).where)
    return ClientSettings(**values)


@dataclass(frozen=True)
class ClientConfig:
    """Everything ``vfl-client`` needs: its identity, its datasets, its models, its privacy and its settings."""

    #: This party's id (``--party`` wins over ``[client] party``); it must match the certificate.
    party: int
    tls: TlsFiles | None  # None only with --insecure
    #: The tables jobs may name, by name; ``[data]`` is the one named "default".
    datasets: dict[str, DataSource]
    settings: ClientSettings = field(default_factory=ClientSettings)
    #: ``[models]``: the model factories a job may ask this party for, by name (``module:function``).
    models: dict[str, str] = field(default_factory=dict)
    #: ``[privacy]``: what this party requires of every job (``vflcore.party_privacy``); nothing by default.
    privacy: PartyPrivacy = field(default_factory=PartyPrivacy)

    @property
    def data(self) -> DataSource:
        """The ``default`` dataset (the ``[data]`` table); ConfigError if the config has none."""
        return dataset_named(self.datasets, DEFAULT_DATASET, f"party {self.party}'s config")


def check_backoff(initial_s: float, max_s: float, where: str) -> None:
    """The reconnect backoff's rule across its two keys: the first wait is at most the cap."""
    if not initial_s <= max_s:
        raise ConfigError(f"{where}: [client] retry_initial_s and retry_max_s must satisfy 0 < initial <= max")


def dataset_named(datasets: Mapping[str, DataSource], name: str, owner: str) -> DataSource:
    """The dataset ``name``; a ConfigError that lists the names ``owner`` has if it is not there."""
    try:
        return datasets[name]
    except KeyError:
        have = sorted(datasets) or "none"
        raise ConfigError(
            f"{owner} has no dataset {name!r} (it has: {have}); add it under [datasets], e.g. "
            f'{name} = {{ path = "data/{name}.csv", id_column = "id" }}'
        ) from None


def tls_files(doc: Mapping[str, Any], source: Path | None, default_stem: str) -> TlsFiles:
    sec = Section(doc, "tls", source)
    certs = Path("certs")
    return TlsFiles(
        ca=sec.path("ca", certs / "ca.pem") or certs / "ca.pem",
        cert=sec.path("cert", certs / f"{default_stem}.pem") or certs / f"{default_stem}.pem",
        key=sec.path("key", certs / f"{default_stem}.key") or certs / f"{default_stem}.key",
    )


def server_config_from(doc: Mapping[str, Any], source: Path | None = None) -> ServerConfig:
    """Build a ServerConfig from a parsed TOML document (its job tables are read when a job is planned).

    The whole document is checked first: an unknown table, or an unknown key in a table, is refused by name.
    """
    refuse_unknown_tables(doc, source, server_tables())
    datasets = _datasets(doc, source, label_column="label")
    if not datasets:
        where = f"{source}" if source else "config"
        raise ConfigError(
            f"{where}: no data: [data] path is required (the active party's CSV), or name datasets under [datasets]"
        )
    return ServerConfig(
        tls=tls_files(doc, source, "server"), datasets=datasets, settings=server_settings_from(doc, source)
    )


def client_config_from(doc: Mapping[str, Any], source: Path | None = None, party: int | None = None) -> ClientConfig:
    """Build a ClientConfig from a parsed TOML document; ``party`` (the flag) wins over the file."""
    refuse_unknown_tables(
        doc, source, client_tables(), hints={"privacy": "; the job's own settings go in the job file's [privacy] table"}
    )
    cli = Section(doc, "client", source)
    given = "--party {}" if party is not None else f"{cli.where}: [client] party = {{}}"
    party = party if party is not None else cli.integer("party")
    if party is None:
        raise ConfigError(f"{cli.where}: no party id: pass --party N or set [client] party")
    if party < 2:
        raise ConfigError(f"{given.format(party)}: passive parties are numbered from 2 (party 1 is the server)")
    datasets = _datasets(doc, source, label_column=None)
    if not datasets:
        raise ConfigError(
            f"{cli.where}: no data: [data] path is required (this party's CSV; or pass --data), or name "
            "datasets under [datasets]"
        )
    return ClientConfig(
        party=party,
        tls=tls_files(doc, source, f"party-{party}"),
        datasets=datasets,
        settings=client_settings_from(doc, source),
        models=_models(doc, source),
        privacy=party_privacy_from_table(doc.get("privacy", {}), str(source) if source else "this party's config"),
    )


def compute_engine(doc: Mapping[str, Any], source: Path | str | None) -> ComputeEngine:
    """``[compute] engine`` and ``ray_address`` (``vflcore.runtime.compute``), for a tool that reads no daemon config.

    An unknown key of ``[compute]`` is refused by name, as a daemon's config refuses it.
    """
    sec = Section(doc, "compute", source)
    refuse_unknown(sec, COMPUTE_KEYS)
    return ComputeEngine(engine_setting(sec), ray_address_setting(sec))


def _models(doc: Mapping[str, Any], source: Path | None) -> dict[str, str]:
    """``[models]``: name = "module:function", the factories a job may name for this party."""
    sec = Section(doc, "models", source)
    models: dict[str, str] = {}
    for name, spec in sec.raw.items():
        if not isinstance(spec, str) or ":" not in spec:
            raise ConfigError(
                f'{sec.where}: [models] {name} = {spec!r}; give a factory, e.g. {name} = "mymodels:build"'
            )
        models[name] = spec
    return models


def _datasets(doc: Mapping[str, Any], source: Path | None, *, label_column: str | None) -> dict[str, DataSource]:
    """``[datasets]`` (name = { path, id_column, label_column }) plus ``[data]`` as the dataset "default"."""
    found: dict[str, DataSource] = {}
    data = Section(doc, "data", source)
    if data.raw:
        path = data.path("path")
        if path is None:
            raise ConfigError(f"{data.where}: [data] path is required (this party's table)")
        found[DEFAULT_DATASET] = _source(data, path, label_column)
    tables = Section(doc, "datasets", source)
    for name, entry in tables.raw.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f'{tables.where}: [datasets] {name} must be a table: {{ path = "...", id_column = "id" }}'
            )
        refuse_unknown(Section({f"datasets.{name}": entry}, f"datasets.{name}", source), DATA_KEYS)
        sec = Section({name: entry}, name, source)
        path = sec.path("path")
        if path is None:
            raise ConfigError(f"{tables.where}: [datasets] {name} needs a path")
        if name in found:
            raise ConfigError(f"{tables.where}: [datasets] {name} is also the [data] table's name; rename one")
        found[name] = _source(sec, path, label_column)
    return found


def _source(sec: Section, path: Path, label_column: str | None) -> DataSource:
    """One dataset's entry; ``label_column`` None: a passive party's, which has neither labels nor held-out rows."""
    if label_column is None:
        if "held_out_ids" in sec.raw:
            raise ConfigError(
                f"{sec.where}: [{sec.name}] held_out_ids is the active party's (vfl-server) setting; "
                "a passive party learns the held-out rows from it"
            )
        return DataSource(path, sec.text("id_column", "id"))
    return DataSource(
        path, sec.text("id_column", "id"), sec.text("label_column", label_column), sec.path("held_out_ids")
    )


def document_with_flags(config: Path | None, flags: Mapping[tuple[str, str], Any]) -> dict[str, Any]:
    """A config file's contents with command-line flags laid on top: a flag that is set wins.

    ``flags`` maps (section, key) to the flag's value; None means the flag was not given. A path
    given on the command line is relative to the working directory, so it is made absolute here
    (paths in the file stay relative to the file).
    """
    doc: dict[str, Any] = load_toml(config) if config else {}
    for (section, key), value in flags.items():
        if value is not None:
            doc.setdefault(section, {})[key] = str(Path.cwd() / value) if isinstance(value, Path) else value
    return doc
