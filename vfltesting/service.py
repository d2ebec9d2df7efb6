"""The service as a user runs it: ``vfl-server`` and ``vfl-client`` daemons as OS processes, started once.

Tests, the demo and ``make bench-service`` share this. Configs are written next to the data, in
the form ``docs/how-to/daemon-configs.md`` documents; the server listens on port 0 (or a given port, for a
restart on the same address) and announces its ports in files.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from vflclient import JobClient, JobEvent
from vfltesting.eventually import eventually
from vfltesting.forked import Launcher
from vfltesting.localrun import Daemon, stop_all, wait_for_port
from vfltesting.pki import Pki

BIN = Path(sys.executable).parent

#: Who starts ``ServiceRun``'s daemons: None execs the console scripts (the demo, the benches);
#: the integration suite forks them from a ``vfltesting.forked.Launcher`` (``daemons_forked_by``).
_launcher: Launcher | None = None


@contextlib.contextmanager
def daemons_forked_by(launcher: Launcher | None) -> Iterator[None]:
    """Inside the block, every ``ServiceRun`` forks its daemons from ``launcher`` (None: execs them)."""
    global _launcher
    before, _launcher = _launcher, launcher
    try:
        yield
    finally:
        _launcher = before


def start_daemon(command: list[str], log: Path, *, append: bool, cwd: Path) -> Daemon:
    """Start ``command`` (vfl-server or vfl-client) with stdout discarded and stderr to ``log``: forked
    inside ``daemons_forked_by`` (the suite), else exec'd (the demo, the benches)."""
    if _launcher is not None:
        return _launcher.start(command, stderr=log, append=append, env=service_env(), cwd=cwd)
    with log.open("ab" if append else "wb") as sink:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink, env=service_env(), cwd=cwd)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return repr(value)


def toml_text(document: Mapping[str, Mapping[str, Any]]) -> str:
    """A TOML file of tables (enough for configs and job files; no arrays of tables)."""
    lines: list[str] = []
    for table, values in document.items():
        lines.append(f"[{table}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
        lines.append("")
    return "\n".join(lines)


@dataclass
class ServiceRun:
    """One server and its passive daemons, as processes, under one folder."""

    root: Path
    pki: Pki
    data: Path
    parties: tuple[int, ...] = (2, 3)
    serving: bool = True
    metrics: bool = False
    #: Extra ``[server]`` and ``[client]`` settings (timeouts, heartbeats) for every config written.
    server_settings: dict[str, Any] = field(default_factory=dict)
    client_settings: dict[str, Any] = field(default_factory=dict)
    #: Extra tables for every client config (e.g. ``{"models": {...}}``, a party's own model factories).
    client_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Extra tables for the server's config (e.g. ``{"psi": {"chunk_ids": 8}}``).
    server_tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: More datasets than "digits" (``data``), by name: each a folder of ``party1.csv``, ``party2.csv``, ...
    datasets: dict[str, Path] = field(default_factory=dict)
    #: Datasets only the active party has, by name: the file itself (the fuzz campaign rewrites it per case).
    active_datasets: dict[str, Path] = field(default_factory=dict)
    #: The tables' file suffix in every dataset folder: ".parquet" for tables of millions of rows.
    table_suffix: str = ".csv"
    #: The address a party dials instead of the server's (a proxy in front of it), by party.
    via: dict[int, str] = field(default_factory=dict)
    #: Every daemon's ``--log-level`` (``debug`` to see every event a daemon can write).
    log_level: str = "info"
    #: Give every daemon ``--log-file`` (its JSON lines there, in ``log_files_by_name``); stderr stays in ``logs``.
    log_files: bool = False
    procs: dict[str, Daemon] = field(default_factory=dict)
    port: int = 0
    logs: dict[str, Path] = field(default_factory=dict)
    log_files_by_name: dict[str, Path] = field(default_factory=dict)
    _restarts: int = 0
    #: Where each passive daemon's latest start begins in its (appended) log, by name.
    _log_starts: dict[str, int] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def server_config(self, listen: str) -> Path:
        path = self.root / "server.toml"
        tls = self.pki.server_files()
        document: dict[str, dict[str, Any]] = {
            "server": {
                "listen": listen,
                "run_dir": str(self.root / "runs"),
                "port_file": str(self.root / "port"),
                "join_timeout_s": 60,
                "step_timeout_s": 60,
                **self.server_settings,
            },
            "tls": {"ca": tls.ca, "cert": tls.cert, "key": tls.key},
            "datasets": {
                name: {"path": folder / f"party1{self.table_suffix}", "id_column": "id", "label_column": "label"}
                for name, folder in self._datasets().items()
            }
            | {
                name: {"path": path, "id_column": "id", "label_column": "label"}
                for name, path in self.active_datasets.items()
            },
        }
        document.update(self.server_tables)
        if self.serving:
            document["serving"] = {"enabled": True, "grpc_listen": "127.0.0.1:0", "rest_listen": "127.0.0.1:0"}
        if self.metrics:
            document["metrics"] = {"enabled": True, "listen": "127.0.0.1:0"}
        path.write_text(toml_text(document))
        return path

    def client_config(self, party: int, server: str) -> Path:
        path = self.root / f"party{party}.toml"
        tls = self.pki.party_files(party)
        document: dict[str, dict[str, Any]] = {
            "client": {
                "server": server,
                "party": party,
                "run_dir": str(self.root / "runs"),
                "retry_initial_s": 0.2,
                "retry_max_s": 2.0,
                "connect_timeout_s": 5,
                **self.client_settings,
            },
            "tls": {"ca": tls.ca, "cert": tls.cert, "key": tls.key},
            "datasets": {
                name: {"path": folder / f"party{party}{self.table_suffix}", "id_column": "id"}
                for name, folder in self._datasets().items()
            },
            **self.client_tables,
        }
        path.write_text(toml_text(document))
        return path

    def _datasets(self) -> dict[str, Path]:
        return {"digits": self.data, **self.datasets}

    def start_server(self, listen: str = "127.0.0.1:0", *, wait: bool = True) -> int:
        """Start vfl-server as a service; returns its port once it listens."""
        (self.root / "port").unlink(missing_ok=True)
        ports = self.root / "serving-ports"
        ports.unlink(missing_ok=True)
        self._restarts += 1
        log = self.root / f"server-{self._restarts}.log"
        self.logs["server"] = log
        cmd = [str(BIN / "vfl-server"), "--config", str(self.server_config(listen)), "--log-format", "json"]
        cmd += ["--log-level", self.log_level, *self._log_file("server", log)]
        if self.serving:
            cmd += ["--serving-port-file", str(ports)]
        self.procs["server"] = start_daemon(cmd, log, append=False, cwd=self.root)
        if wait:
            self.port = wait_for_port(self.root / "port", self.procs["server"], timeout_s=120)
        return self.port

    def start_clients(self, server: str | None = None) -> None:
        """Start every passive daemon (they wait, and retry, until the server is there)."""
        for party in self.parties:
            self.start_client(party, server)

    def start_client(self, party: int, server: str | None = None) -> None:
        """Start (or start again) party ``party``'s daemon; its log is appended to."""
        log = self.root / f"party-{party}.log"
        self.logs[f"party-{party}"] = log
        config = self.client_config(party, server or self.via.get(party) or self.address)
        cmd = [str(BIN / "vfl-client"), "--party", str(party), "--config", str(config), "--log-format", "json"]
        cmd += ["--log-level", self.log_level, *self._log_file(f"party-{party}", log)]
        name = f"party-{party}"
        self._log_starts[name] = log.stat().st_size if log.exists() else 0  # this start's lines come after
        self.procs[name] = start_daemon(cmd, log, append=True, cwd=self.root)

    def wait_connected(self, parties: Iterable[int] | None = None, timeout_s: float = 120) -> None:
        """Wait until each passive daemon (every party by default) has connected to the server since its last start.

        ``start_clients`` returns as soon as the processes exist; a job submitted before a party connects
        waits for it only ``join_timeout_s``, and a daemon's start (imports, warm-up) took 60 s on a
        machine loaded 24 deep (2026-11-29). What counts is the daemon's own ``connected`` log event.
        """
        for party in self.parties if parties is None else parties:
            name = f"party-{party}"
            connected = functools.partial(log_events, self.logs[name], "connected", since=self._log_starts.get(name, 0))
            wait_until(connected, f"party {party} to connect", self, timeout_s)

    def _log_file(self, name: str, stderr: Path) -> list[str]:
        """``--log-file`` beside the daemon's stderr file (``server-2.log.jsonl``), if ``log_files``."""
        if not self.log_files:
            return []
        path = self.log_files_by_name[name] = stderr.with_name(stderr.name + ".jsonl")
        return ["--log-file", str(path)]

    def kill(self, name: str) -> None:
        """``kill -9`` one daemon ("server" or "party-N"), as a crash or a power cut would stop it."""
        proc = self.procs[name]
        proc.kill()
        proc.wait()

    def serving_ports(self, timeout_s: float = 60) -> tuple[int, int]:
        """The inference endpoint's gRPC and REST ports (``announced_ports``)."""
        return announced_ports(self.root / "serving-ports", timeout_s)

    def console_port(self, timeout_s: float = 60) -> int:
        """The console's port, from the server's ``console_started`` log line (``[console] listen`` on port 0)."""

        def announced() -> int | None:
            for line in self.logs["server"].read_text(errors="replace").splitlines():
                if '"console_started"' in line:
                    return int(json.loads(line)["port"])
            return None

        return eventually(announced, "the console to announce its port", timeout_s, every=0.1)

    def stop(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """SIGTERM the named processes (default: all) and return their exit codes."""
        chosen = {n: p for n, p in self.procs.items() if names is None or n in set(names)}
        for proc in chosen.values():
            if proc.poll() is None:
                proc.terminate()
        codes = {}
        for name, proc in chosen.items():
            try:
                codes[name] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def tail(self, lines: int = 30) -> str:
        """The end of every daemon's log, for a failing test's message."""
        out = []
        named = [*self.logs.items(), *((f"{n} --log-file", p) for n, p in self.log_files_by_name.items())]
        for name, path in named:
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"--- {name} ({path}):\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def close(self) -> None:
        stop_all(self.procs)

    @contextlib.contextmanager
    def started(self) -> Iterator[ServiceRun]:
        """The server, then every passive daemon, started; all of them stopped on leaving, whatever happened."""
        try:
            self.start_server()
            self.start_clients()
            yield self
        finally:
            self.close()


def service_env() -> dict[str, str]:
    """The daemons' environment: this checkout on the path (vfltesting is not installed).

    Without ``PYTHONDONTWRITEBYTECODE``, which a sandbox or a CI image may set: each daemon would
    then compile every project module it imports from its source again, about 0.2 s of CPU a start
    and some 240 starts a suite run (measured 2026-11-28). The first one writes ``__pycache__``, as
    an installed package has it, and the others read it.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def announced_ports(path: Path, timeout_s: float = 60, *, server: Daemon | None = None) -> tuple[int, int]:
    """The inference endpoint's gRPC and REST ports, from the file vfl-server writes once both listen
    (``--serving-port-file``); fails at once if ``server`` exits first."""

    def announced() -> tuple[int, int] | None:
        if server is not None and server.poll() is not None:
            raise AssertionError(f"vfl-server exited with {server.returncode} before serving")
        if not (path.exists() and path.read_text().endswith("\n")):
            return None
        grpc_port, rest_port = path.read_text().split()
        return int(grpc_port), int(rest_port)

    return eventually(announced, "the inference endpoint to announce its ports", timeout_s, every=0.1)


def job_document(job_id: str, algorithm: str, *, epochs: int = 1, **job: Any) -> dict[str, dict[str, Any]]:
    """A digits job for parties 2 and 3 on the dataset "digits", as a job file holds it."""
    options = job.pop("algorithm_options", {})
    table: dict[str, Any] = {
        "job_id": job_id,
        "algorithm": algorithm,
        "task": "classification",
        "passive_parties": [2, 3],
        "dataset": "digits",
        "seed": 0,
        "epochs": epochs,
        "batch_size": 32,
        "embedding_dim": 16,
        "bottom_hidden": [64],
        "optimizer": "adam",
        "learning_rate": 0.002,
        "test_fraction": 0.2,
        "join_timeout_s": 60,
    }
    table.update(job)
    document: dict[str, dict[str, Any]] = {"job": table, "model": {"top_hidden": [64]}}
    if options:
        document["algorithm"] = dict(options)
    return document


def log_events(log: Path, name: str | None = None, *, since: int = 0) -> list[dict[str, Any]]:
    """A daemon's JSON log events (``--log-format json``), in order; only those called ``name`` if given,
    and only those written from byte ``since`` on (an appended log: one start's lines)."""
    text = ""
    if log.exists():
        with log.open("rb") as handle:
            handle.seek(since)
            text = handle.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        if not line.startswith("{") or (name is not None and f'"{name}"' not in line):
            continue
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                found.append(event)
    return found


def event_time(event: Mapping[str, Any]) -> float:
    """A log event's timestamp as Unix seconds (the daemons log UTC ISO 8601)."""
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def wait_until(
    condition: Callable[[], object], what: str, run: ServiceRun, timeout_s: float = 120, *, every_s: float = 0.01
) -> None:
    """``eventually``, failing with the daemons' log tails: poll ``condition`` every ``every_s`` up to ``timeout_s``."""
    eventually(condition, what, timeout_s, every=every_s, explain=run.tail)


def finish_job(jobs: JobClient, run: ServiceRun, job_id: str) -> list[str]:
    """Watch the job to its end; it must finish. Returns its event lines."""
    lines = [str(event) for event in jobs.watch(job_id)]
    assert jobs.get(job_id).state == "finished", "\n".join(lines) + run.tail()
    return lines


def watch_until(jobs: JobClient, job_id: str, matches: Callable[[JobEvent], bool], what: str) -> JobEvent:
    """The first event of ``job_id`` (its history included) that ``matches``; fails naming ``what`` if the job
    ends without one. A watch, not a poll: the service streams the events, so nothing is asked twice."""
    for event in jobs.watch(job_id):
        if matches(event):
            return event
    raise AssertionError(f"job {job_id} ended without {what}")
