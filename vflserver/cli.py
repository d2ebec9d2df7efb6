"""``vfl-server``: the active party's daemon. Thin: parse flags, load, start the service, wait.

    vfl-server --config server.toml                  # a service: runs submitted jobs until a signal
    vfl-server --config server.toml --once           # run the config's [job], exit with its outcome
    vfl-server --config server.toml --psi-only       # align IDs for the [job], then exit

The service (``vflserver.jobs.app``) keeps its jobs in a SQLite store in the run directory;
jobs come from ``vfl-jobs`` / ``JobClient``, and a ``[job]`` table in the config is submitted at
start. Flags override the config file. Results (per-epoch metrics, final inference) go to stdout;
logs go to stderr, or to ``--log-file``. Exit codes are listed in ``vflcore.runtime.daemon``: as a service, a signal is
the normal way to stop and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import structlog

from vflcore.data.tables import DataError
from vflcore.errors import ConfigError, JobStoreError, VflError
from vflcore.job.distill import refuse_student_names
from vflcore.psi import x25519
from vflcore.runtime import cli_flags as flags
from vflcore.runtime import daemon
from vflcore.runtime.config import ServerConfig, server_config_from
from vflcore.runtime.warmup import warm_up
from vflcore.security.tls import TlsConfigError
from vflcore.wire.traffic import summary_lines
from vflserver.console.server import console_for
from vflserver.federation.alignment import AlignmentResult
from vflserver.inference.config import serving_config_from
from vflserver.inference.run import write_ports
from vflserver.jobs.app import Service
from vflserver.jobs.progress import JobListener
from vflserver.jobs.store import ENDED, JobRecord, JobStore
from vflserver.plan.admission import check_models, read_active_table
from vflserver.plan.document import TABLES, plan_from_document
from vflserver.training.active_party import ActiveParty
from vflserver.training.reports import EpochReport, RunSummary

log = structlog.get_logger(__name__)


#: What ``--help`` says first: the daemon an operator runs, not the one-shot job it also can be.
_DESCRIPTION = (
    "The active party's daemon (party 1, the label holder). It listens for the passive parties' "
    "vfl-client daemons and for operators (vfl-jobs), keeps every job in a SQLite job store, and runs "
    "the jobs they submit until SIGINT or SIGTERM; optionally it serves each finished "
    "job's model (--serve). --once runs the config's [job] and exits instead."
)
_EPILOG = (
    "A service config: examples/configs/service.toml (vfl-server --config examples/configs/service.toml). "
    "Keys, systemd units and logs: docs/how-to/systemd.md."
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vfl-server", description=_DESCRIPTION, epilog=_EPILOG)
    flags.add_config(
        p, "server TOML file (a service: examples/configs/service.toml; one job: examples/configs/server.toml)"
    )
    flag = functools.partial(flags.add_config_flag, p)
    flag("--listen", ("server", "listen"), help="address to listen on, e.g. 0.0.0.0:50051 (port 0 picks a free port)")
    flag("--data", ("data", "path"), type=Path, help="the active party's CSV (ids, labels, own features)")
    flag("--id-column", ("data", "id_column"), help="name of the ID column (default: id)")
    flag("--label-column", ("data", "label_column"), help="name of the label column (default: label)")
    flags.add_tls_files(
        p,
        ca="project CA certificate (default: certs/ca.pem)",
        cert="server certificate (default: certs/server.pem)",
        key="server private key (default: certs/server.key)",
    )
    flag("--run-dir", ("server", "run_dir"), type=Path, help="where checkpoints and reports go (default: runs)")
    flag("--epochs", ("job", "epochs"), type=int, help="override [job] epochs")
    flag("--job-id", ("job", "job_id"), help="override [job] job_id")
    flag("--port-file", ("server", "port_file"), type=Path, help="write the bound port here once listening")
    flag("--store", ("server", "store"), type=Path, help="the job store, a SQLite file (default: RUN_DIR/jobs.sqlite)")
    p.add_argument(
        "--once",
        action="store_true",
        help="run the config's [job] and exit with its outcome (0 finished, 1 failed) instead of serving on",
    )
    p.add_argument(
        "--psi-only",
        action="store_true",
        help="align IDs by PSI with every party of the [job], write aligned_ids.csv for each party, then stop",
    )
    flag(
        "--serve",
        ("serving", "enabled"),
        action="store_true",
        help="run the inference endpoints ([serving]); finished jobs are served under their job id "
        "(with --once: after the job, serve until SIGINT/SIGTERM)",
    )
    p.add_argument(
        "--serving-port-file",
        type=Path,
        help="with --serve: write 'grpc_port rest_port' here (with --once: once the job's model is served)",
    )
    flags.add_insecure(p)
    daemon.add_logging_flags(p)
    daemon.add_log_file_flag(p)
    return p


def _document(args: argparse.Namespace) -> dict[str, Any]:
    """The config file's contents with the flags laid on top (flags win)."""
    return flags.document(args)


class _Printer(JobListener):
    """What a person at the terminal wants to see of each job: alignment, epochs, the outcome."""

    def aligned(self, job_id: str, result: AlignmentResult) -> None:
        how = "reused the saved alignment" if result.reused else f"PSI pairwise overlaps {result.pairwise}"
        print(f"{job_id}: aligned {result.table.num_rows} common IDs ({how}) in {result.seconds:.1f} s", flush=True)

    def epoch(self, job_id: str, report: EpochReport) -> None:
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in report.metrics.items())
        print(
            f"epoch {report.epoch + 1:>3}  train_loss {report.train_loss:.4f}  test_loss {report.test_loss:.4f}  "
            f"{metrics}  ({report.seconds:.1f} s, {report.wire_mb:.3f} MB on the wire)",
            flush=True,
        )

    def ended(self, record: JobRecord, summary: RunSummary | None, active: ActiveParty | None) -> None:
        if summary is None or active is None:
            print(f"vfl-server: job {record.job_id} {record.state}: {record.error}", file=sys.stderr, flush=True)
            return
        if active.psi_only:
            print(
                f"aligned IDs written to {active.run_dir / 'aligned_ids.csv'} (and on every passive party)", flush=True
            )
            return
        final = "  ".join(f"{k} {v:.4f}" for k, v in summary.final_metrics.items())
        how = "inference by the active party alone" if summary.artifact is not None else "federated inference"
        print(f"{how} on {len(active.schedule.test_rows)} held-out rows: {final}", flush=True)
        for line in summary_lines(summary.wire, own="server"):
            print(line, flush=True)
        print(f"checkpoints and reports: {summary.run_dir}", flush=True)
        if summary.artifact is not None:
            print(f"standalone model (serves with no passive party): {summary.artifact}", flush=True)
        student = summary.student
        if student is not None:
            scores = "  ".join(f"{k} {v:.4f}" for k, v in student.final_metrics.items())
            print(f"student {student.job_id}, the active party alone, on the same rows: {scores}", flush=True)
            if student.artifact is not None:
                print(f"student model (serves with no passive party): {student.artifact}", flush=True)
        print(f"vfl-server: job {record.job_id} finished", flush=True)


def _job_document(document: dict[str, Any], psi_only: bool) -> dict[str, Any]:
    """The config's job tables as a job document (``[serving]`` keeps only the job's own keys)."""
    job = {name: dict(document[name]) for name in TABLES if isinstance(document.get(name), dict)}
    job.setdefault("job", {})
    if "serving" in job:
        job["serving"] = {k: v for k, v in job["serving"].items() if k == "degraded"}
    if psi_only:
        job["job"]["psi_only"] = True
    return job


def _refuse_stray_job_tables(document: dict[str, Any], source: Path | None) -> None:
    """A job's tables with no ``[job]`` to belong to would be ignored: refuse them, naming the file."""
    stray = [name for name in ("algorithm", "model", "privacy", "distill") if name in document]
    if stray:
        raise ConfigError(
            f"{source or 'the config'}: [{stray[0]}] belongs to a job, and this config has no [job] table; "
            "put it in a job file for vfl-jobs, or add a [job] table to run it at start"
        )


def _check_data(config: ServerConfig, job: dict[str, Any] | None) -> None:
    """Fail at start, naming the file, if a dataset is missing or (for the config's job) unreadable."""
    for name, source in config.datasets.items():
        if not source.path.exists():
            raise DataError(f"dataset {name!r}: {source.path} does not exist")
    if job is None:
        return
    plan = plan_from_document(job, default_join_timeout_s=config.settings.join_timeout_s, where="the config's [job]")
    refuse_student_names(plan.job.job_id, where="the config's [job]")
    check_models(plan, read_active_table(plan, config.datasets), where="the config's [job]")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        daemon.setup_logging(args)
    except (ConfigError, ValueError) as exc:  # --log-file cannot be opened, or an unknown --log-level
        print(f"vfl-server: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    structlog.contextvars.bind_contextvars(party=1)
    daemon.arm_crash_traces(args)  # before anything that could crash: a trace, not silence
    once = args.once or args.psi_only
    try:
        document = _document(args)
        config = server_config_from(document, args.config)
        daemon.check_device(config.settings.device)
        x25519.choose_at_start(config.settings.psi_x25519)
        daemon.check_engine(config.settings.compute_engine)  # ConnectionError: an OSError, exit 3
        serving = serving_config_from(document, args.config)
        # A [job] table is submitted at start; --once runs it (all defaults if there is none), as
        # the one-shot server did. It is read once, as any job is: by plan_from_document.
        job = _job_document(document, args.psi_only) if "job" in document or once else None
        if job is None:
            _refuse_stray_job_tables(document, args.config)
        _check_data(config, job)
        service = Service(config, serving=serving, insecure=args.insecure, listener=_Printer())
        try:
            console = console_for(service)
        except BaseException:
            service.stop()
            raise
    except (ConfigError, DataError, TlsConfigError, ValueError, JobStoreError) as exc:
        log.error("bad_configuration", error=str(exc))
        print(f"vfl-server: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    except OSError as exc:
        print(f"vfl-server: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE

    daemon.prepare_compute(config.settings.torch_threads)
    if not args.psi_only:  # before anything listens: the first job must not pay for torch's first use
        warm_up(config.settings.device)
    stopped = threading.Event()
    # Before anything announces the port: a signal that follows the announcement must find it.
    signals = daemon.ShutdownSignals(stopped.set).install()
    try:
        service.start()
        if console is not None:
            console.start()
    except OSError as exc:
        print(f"vfl-server: {exc}", file=sys.stderr)
        if console is not None:
            console.stop()
        service.stop()
        return daemon.EXIT_UNREACHABLE
    try:
        code = _run(service, config, job, args, once, stopped, signals)
    finally:
        if console is not None:
            console.stop()
        service.stop()
    # After a signal, os._exit: the console's and the metrics' callbacks hold the service in
    # reference cycles that the start-up freeze (warm_up) keeps from being collected, so the gRPC
    # server is still alive at exit and gRPC's native exit handler waited 2 s for it (strace).
    return daemon.leave(code, signals)


def _run(
    service: Service,
    config: ServerConfig,
    job: dict[str, Any] | None,
    args: argparse.Namespace,
    once: bool,
    stopped: threading.Event,
    signals: daemon.ShutdownSignals,
) -> int:
    port_file = config.settings.port_file
    if port_file is not None:
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.write_text(f"{service.port}\n")
    store = config.settings.store_path
    print(f"vfl-server: listening on port {service.port} (federation and Control API); job store {store}", flush=True)
    if service.serving_ports is not None and not once:
        _write_serving_ports(service, args.serving_port_file)
    job_id = _submit_config_job(service, job, once) if job is not None else None
    if not once or job_id is None:
        stopped.wait()
        print("vfl-server: stopped by signal; queued jobs stay queued in the store", file=sys.stderr, flush=True)
        return daemon.EXIT_OK
    record = _wait_for_end(service.store, job_id, stopped)
    if record is None:  # a signal while the job ran: it is recorded as interrupted
        print("vfl-server: stopped by signal; checkpoints of finished epochs are kept", file=sys.stderr)
        return signals.exit_code or daemon.EXIT_SIGTERM
    if record.state != "finished":
        log.error("job_failed", error=record.error)
        print(f"vfl-server: job failed: {record.error}", file=sys.stderr)
        return daemon.EXIT_JOB_FAILED
    if service.serving_ports is None or not record.served:
        return daemon.EXIT_OK
    _write_serving_ports(service, args.serving_port_file)
    stopped.wait()
    print("vfl-server: stopped serving", flush=True)
    return daemon.EXIT_OK


def _submit_config_job(service: Service, job: dict[str, Any], once: bool) -> str | None:
    """Queue the config's ``[job]``. A service restarted with the same config does not run it twice.

    As a service, a ``[job]`` without ``job_id`` gets one derived from its content, so a restart
    finds it in the store; with ``--once`` it gets a fresh id (or, if it names one that has
    ended, runs again under that id, as the one-shot server always did).
    """
    job_id = str(job["job"].get("job_id") or "")
    if not job_id and not once:
        digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:10]
        job_id = job["job"]["job_id"] = f"config-{digest}"
    if job_id:
        try:
            old = service.store.get(job_id)
        except VflError:
            old = None
        if old is not None and (not once or old.state not in ENDED):
            log.info("config_job_known", job=job_id, state=old.state)
            print(f"vfl-server: job {job_id} from the config is already in the store ({old.state})", flush=True)
            return job_id
        if old is not None:  # --once: run it again, as a fresh job under the same id
            service.store.forget(job_id)
    record = service.submit(job, submitter="vfl-server config")
    print(
        f"vfl-server: job {record.job_id} ({record.algorithm}) queued from the config; "
        f"waiting for its parties {record.document['job'].get('passive_parties', [])}",
        flush=True,
    )
    return record.job_id


def _wait_for_end(store: JobStore, job_id: str, stopped: threading.Event) -> JobRecord | None:
    """The job's record once it ended, or None if a signal came first."""
    seq = 0
    while not stopped.is_set():
        for event in store.wait_for_events(job_id, seq, timeout_s=0.5):
            seq = event.seq
        record = store.get(job_id)
        if record.state in ENDED:
            return record
    return None


def _write_serving_ports(service: Service, port_file: Path | None) -> None:
    ports = service.serving_ports
    assert ports is not None
    serving = service.endpoint.config if service.endpoint is not None else None
    host = serving.grpc_listen.rpartition(":")[0] if serving else "?"
    if port_file is not None:
        write_ports(port_file, ports)
    print(
        f"vfl-server: inference endpoint (Open Inference Protocol) on gRPC {host}:{ports.grpc} and REST "
        f"https://{host}:{ports.rest}/v2/models/<job id>; finished jobs are served under their id",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
