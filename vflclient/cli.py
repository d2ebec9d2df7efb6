"""``vfl-client``: a passive party's daemon, a thin program over the public SDK.

    vfl-client --party 2 --config party2.toml              # a daemon: every job that names party 2
    vfl-client --party 2 --config party2.toml --once       # one job, then exit with its outcome
    vfl-client --party 2 --config party2.toml --check      # preflight: explain TLS problems

As a daemon it retries an unreachable server with backoff (``vflclient._daemon``) and stops only
on SIGINT or SIGTERM, which exit 0. Flags override the config file. Exit codes are listed in
``vflcore.runtime.daemon``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
from dataclasses import replace
from pathlib import Path

import structlog

from vflclient import Connection, DataError, JoinRejected, PermissionDenied, ServerUnavailable, VflError
from vflclient._daemon import PartyDaemon
from vflcore.errors import ConfigError, TlsConfigError
from vflcore.psi import x25519
from vflcore.runtime import cli_flags as flags
from vflcore.runtime import daemon
from vflcore.runtime.config import ClientConfig, client_config_from
from vflcore.runtime.warmup import warm_up
from vflcore.security.preflight import diagnose

log = structlog.get_logger(__name__)

#: Preflight checks that look only at this party's own files (see vflcore.security.preflight).
_LOCAL_CHECKS = frozenset({"ca-file", "cert-file", "key-file", "key-match", "issuer", "validity", "party"})


#: What ``--help`` says first: the daemon an operator runs, not the one job it also can take part in.
_DESCRIPTION = (
    "A passive party's daemon (party N >= 2, a feature holder). It dials out to vfl-server (it needs no "
    "open port), takes part in every job that names its party, and retries a lost server with backoff, "
    "until SIGINT or SIGTERM. --once takes part in one job and exits instead."
)
_EPILOG = (
    "A daemon config: examples/configs/party2.toml (vfl-client --party 2 --config examples/configs/party2.toml), "
    "beside the server's examples/configs/service.toml. Keys: docs/reference/configuration.md; "
    "systemd units and logs: docs/how-to/systemd.md."
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vfl-client", description=_DESCRIPTION, epilog=_EPILOG)
    p.add_argument("--party", type=int, help="this party's id (>= 2); must match its certificate")
    flags.add_config(p, "client TOML file (see examples/configs/party2.toml)")
    flag = functools.partial(flags.add_config_flag, p)
    flag("--server", ("client", "server"), help="the active party's address, host:port")
    flag("--data", ("data", "path"), type=Path, help="this party's CSV (ids and features)")
    flag("--id-column", ("data", "id_column"), help="name of the ID column (default: id)")
    flags.add_tls_files(
        p,
        ca="project CA certificate (default: certs/ca.pem)",
        cert="this party's certificate (default: certs/party-N.pem)",
        key="this party's private key (default: certs/party-N.key)",
    )
    flag("--run-dir", ("client", "run_dir"), type=Path, help="where this party's checkpoints go (default: runs)")
    flag("--model-factory", ("model", "factory"), help="module:function building this party's own bottom model")
    p.add_argument("--check", action="store_true", help="check certificates and the connection, then exit")
    p.add_argument(
        "--once",
        action="store_true",
        help="take part in one job, then exit with its outcome (default: a daemon, job after job, until a signal)",
    )
    flags.add_insecure(p)
    daemon.add_logging_flags(p)
    daemon.add_log_file_flag(p)
    return p


def _check(config: ClientConfig) -> int:
    """Preflight: explain certificate and connection problems in plain words."""
    assert config.tls is not None
    findings = diagnose(config.settings.server, config.tls, config.party)
    for finding in findings:
        print(f"[{'ok' if finding.ok else 'FAIL'}] {finding.check}: {finding.message}")
    failed = {f.check for f in findings if not f.ok}
    if failed:
        # a problem with this party's own files is a configuration error; anything else is the
        # network or the server's side of TLS
        return daemon.EXIT_CONFIG if failed <= _LOCAL_CHECKS else daemon.EXIT_UNREACHABLE
    try:
        with Connection(config.settings.server, config.party, tls=config.tls, connect_timeout_s=10) as conn:
            party, state = conn.heartbeat()
    except TlsConfigError:
        raise  # this party's own files: a configuration error, which main reports
    except VflError as exc:
        print(f"[FAIL] heartbeat: {exc}")
        return daemon.EXIT_REFUSED if isinstance(exc, PermissionDenied) else daemon.EXIT_UNREACHABLE
    print(f"[ok] heartbeat: the server sees this connection as party {party}; job state: {state}")
    return daemon.EXIT_OK


#: As a daemon, how long one connection attempt may take before the backoff's wait.
_ATTEMPT_TIMEOUT_S = 10.0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        daemon.setup_logging(args)
    except (ConfigError, ValueError) as exc:  # --log-file cannot be opened, or an unknown --log-level
        print(f"vfl-client: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    # before anything that could crash: a trace, not silence; --check prints its report and nothing else
    daemon.arm_crash_traces(args, announce=not args.check)
    try:
        config = client_config_from(flags.document(args), args.config, party=args.party)
        structlog.contextvars.bind_contextvars(party=config.party)
        if args.insecure:
            config = replace(config, tls=None)
        if args.check:
            if config.tls is None:
                print(
                    "vfl-client: --check verifies certificates; it makes no sense with --insecure",
                    file=sys.stderr,
                )
                return daemon.EXIT_CONFIG
            return _check(config)
        party = PartyDaemon(config, functools.partial(_connect, config, args))
        daemon.check_device(config.settings.device)
        x25519.choose_at_start(config.settings.psi_x25519)
    except (ConfigError, DataError, TlsConfigError, ValueError) as exc:
        print(f"vfl-client: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    try:
        daemon.check_engine(config.settings.compute_engine)
    except ConnectionError as exc:
        print(f"vfl-client: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE

    daemon.prepare_compute(config.settings.torch_threads)
    try:
        party.check_datasets()  # every table readable now, not at the first job that names it
    except (ConfigError, DataError) as exc:
        print(f"vfl-client: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG

    signals = daemon.ShutdownSignals(party.stop).install()
    warm_up(config.settings.device)  # before it dials out: the first job must not pay for torch's first use
    if not args.once:
        try:
            party.run_forever()
        except TlsConfigError as exc:
            print(f"vfl-client: {exc}", file=sys.stderr)
            return daemon.EXIT_CONFIG
        print(f"vfl-client party {config.party}: {_stopped(party)}", flush=True)
        return daemon.leave(daemon.EXIT_OK, signals)
    return daemon.leave(_run_once(party, config, signals), signals)


def _connect(config: ClientConfig, args: argparse.Namespace, stop: threading.Event) -> Connection:
    """A connection to the server, as the daemon (or ``--once``) dials it; ``stop`` ends an attempt at once."""
    settings = config.settings
    return Connection(
        settings.server,
        config.party,
        tls=config.tls,
        insecure=args.insecure,
        connect_timeout_s=settings.connect_timeout_s
        if args.once
        else min(settings.connect_timeout_s, _ATTEMPT_TIMEOUT_S),
        stop=stop,  # a signal ends a connection attempt at once
        fail_fast=not args.once,  # the daemon retries with its own backoff, and logs each try
    )


def _stopped(party: PartyDaemon) -> str:
    """What the daemon did before a signal stopped it: the jobs it finished, and the one it was in, if any."""
    if party.stopped_during is None:
        return f"stopped by signal after {party.jobs_done} job(s)"
    return f"stopped by signal during job {party.stopped_during} after {party.jobs_done} finished job(s)"


def _run_once(party: PartyDaemon, config: ClientConfig, signals: daemon.ShutdownSignals) -> int:
    """One job, with the one-shot exit codes."""
    try:
        result = party.run_once()
    except (PermissionDenied, JoinRejected) as exc:
        print(f"vfl-client: the server refused party {config.party}: {exc}", file=sys.stderr)
        return daemon.EXIT_REFUSED
    except ServerUnavailable as exc:
        if signals.exit_code is not None:
            return signals.exit_code
        print(f"vfl-client: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE
    except (TlsConfigError, DataError, ConfigError) as exc:
        print(f"vfl-client: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    except VflError as exc:
        if signals.exit_code is not None:
            return signals.exit_code
        print(f"vfl-client: job failed: {exc}", file=sys.stderr)
        return daemon.EXIT_JOB_FAILED
    if signals.exit_code is not None:
        return signals.exit_code
    # One write, newline included: parties sharing a terminal must not splice their lines.
    sys.stdout.write(
        f"vfl-client party {config.party}: job {result.job_id} {'finished' if result.success else 'ended'}: "
        f"{result.message}; {result.epochs_trained} epochs; checkpoints in {result.run_dir}\n"
    )
    sys.stdout.flush()
    return daemon.EXIT_OK if result.success else daemon.EXIT_JOB_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
