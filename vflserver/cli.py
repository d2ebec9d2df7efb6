"""``vfl-server``: the active party's daemon. Thin: parse flags, load, serve, run the job.

    vfl-server --config server.toml [--listen 0.0.0.0:50051] [--data party1.csv] ...

Flags override the config file. Results (per-epoch metrics, final federated inference) go to
stdout; logs go to stderr. Exit codes are listed in ``vflcore.runtime.daemon``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

import grpc
import structlog

from vflalgorithms.base import algorithm_spec
from vflcore.data.tables import DataError, read_party_csv
from vflcore.errors import ConfigError, JobAborted, VflError
from vflcore.runtime import daemon
from vflcore.runtime.config import document_with_flags, server_config_from
from vflcore.security.tls import TlsConfigError, TlsFiles
from vflcore.wire.traffic import summary_lines
from vflserver.active_party import ActiveParty, EpochReport, RunSummary
from vflserver.alignment import AlignmentResult
from vflserver.server import build_server
from vflserver.serving.artifact import ArtifactServable
from vflserver.serving.config import ServingConfig, serving_config_from
from vflserver.serving.federated import FederatedServable
from vflserver.serving.run import serve_until
from vflserver.serving.servable import Servable

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vfl-server", description="Active party (label holder) of a VFL job.")
    p.add_argument("--config", type=Path, help="server TOML file (see examples/configs/server.toml)")
    p.add_argument("--listen", help="address to listen on, e.g. 0.0.0.0:50051 (port 0 picks a free port)")
    p.add_argument("--data", type=Path, help="the active party's CSV (ids, labels, own features)")
    p.add_argument("--id-column", help="name of the ID column (default: id)")
    p.add_argument("--label-column", help="name of the label column (default: label)")
    p.add_argument("--ca", type=Path, help="project CA certificate (default: certs/ca.pem)")
    p.add_argument("--cert", type=Path, help="server certificate (default: certs/server.pem)")
    p.add_argument("--key", type=Path, help="server private key (default: certs/server.key)")
    p.add_argument("--run-dir", type=Path, help="where checkpoints and reports go (default: runs)")
    p.add_argument("--epochs", type=int, help="override [job] epochs")
    p.add_argument("--job-id", help="override [job] job_id")
    p.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    p.add_argument(
        "--psi-only",
        action="store_true",
        help="align IDs by PSI with every party, write aligned_ids.csv for each party, then stop",
    )
    p.add_argument(
        "--serve",
        action="store_true",
        help="after training, serve the model on the inference endpoints ([serving]) until SIGINT/SIGTERM",
    )
    p.add_argument("--serving-port-file", type=Path, help="with --serve: write 'grpc_port rest_port' here")
    p.add_argument("--insecure", action="store_true", help="DEVELOPMENT ONLY: plaintext, no certificates")
    daemon.add_logging_flags(p)
    return p


def _document(args: argparse.Namespace) -> dict[str, Any]:
    """The config file's contents with the flags laid on top (flags win)."""
    return document_with_flags(
        args.config,
        {
            ("server", "listen"): args.listen,
            ("server", "run_dir"): args.run_dir,
            ("server", "port_file"): args.port_file,
            ("data", "path"): args.data,
            ("data", "id_column"): args.id_column,
            ("data", "label_column"): args.label_column,
            ("tls", "ca"): args.ca,
            ("tls", "cert"): args.cert,
            ("tls", "key"): args.key,
            ("job", "epochs"): args.epochs,
            ("job", "job_id"): args.job_id,
            ("serving", "enabled"): True if args.serve else None,
        },
    )


def _print_alignment(result: AlignmentResult) -> None:
    how = "reused the saved alignment" if result.reused else f"PSI pairwise overlaps {result.pairwise}"
    print(f"aligned {result.table.num_rows} common IDs ({how}) in {result.seconds:.1f} s", flush=True)


def _print_epoch(report: EpochReport) -> None:
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in report.metrics.items())
    print(
        f"epoch {report.epoch + 1:>3}  train_loss {report.train_loss:.4f}  test_loss {report.test_loss:.4f}  "
        f"{metrics}  ({report.seconds:.1f} s, {report.wire_mb:.3f} MB on the wire)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    daemon.setup_logging(args)
    structlog.contextvars.bind_contextvars(party=1)
    try:
        document = _document(args)
        config = server_config_from(document, args.config)
        serving = serving_config_from(document, args.config)
        if args.psi_only:  # only the ID column matters: labels and features may be absent or anything
            table = read_party_csv(config.data.path, id_column=config.data.id_column, feature_columns=())
        else:
            table = read_party_csv(
                config.data.path, id_column=config.data.id_column, label_column=config.data.label_column
            )
        active = ActiveParty(
            config.job,
            table,
            top_hidden=config.top_hidden,
            top_dropout=config.top_dropout,
            run_dir=config.run_dir,
            step_timeout_s=config.step_timeout_s,
            psi_workers=config.psi_workers,
            psi_only=args.psi_only,
        )
        server, port = build_server(
            active.parties, config.listen, None if args.insecure else config.tls, insecure=args.insecure
        )
    except (ConfigError, DataError, TlsConfigError, ValueError) as exc:
        log.error("bad_configuration", error=str(exc))
        print(f"vfl-server: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    except OSError as exc:
        print(f"vfl-server: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE

    daemon.prepare_compute(config.torch_threads)

    def request_stop() -> None:
        active.stop_event.set()
        active.parties.abort(JobAborted("the server is shutting down (signal)"))

    # Before anything announces the port: a signal that follows the announcement must find them.
    signals = daemon.ShutdownSignals(request_stop).install()
    server.start()
    log.info(
        "listening",
        port=port,
        job=active.job.job_id,
        algorithm=active.job.algorithm,
        rows=active.job.num_rows,
    )
    if config.port_file is not None:
        config.port_file.parent.mkdir(parents=True, exist_ok=True)
        config.port_file.write_text(f"{port}\n")
    print(
        f"vfl-server: job {active.job.job_id} ({active.job.algorithm}, {active.own_table.num_rows} IDs) "
        f"listening on port {port}; waiting for parties {list(active.job.passive_parties)}",
        flush=True,
    )

    outcome: dict[str, Any] = {}

    # A model that spans every party keeps them connected while it is served; APFed's does not.
    federated = (
        serving.enabled
        and not args.psi_only
        and algorithm_spec(active.job.algorithm).active_half().needs_parties_to_predict
    )

    def run_job() -> None:
        try:
            outcome["summary"] = active.run(
                join_timeout_s=config.join_timeout_s,
                on_epoch=_print_epoch,
                on_aligned=_print_alignment,
                keep_serving=federated,
            )
        except BaseException as exc:  # reported on the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=run_job, name="job", daemon=True)
    worker.start()
    worker.join()
    if not federated or "error" in outcome or signals.fired:
        server.stop(grace=5).wait()

    if signals.exit_code is not None:
        print("vfl-server: stopped by signal; checkpoints of finished epochs are kept", file=sys.stderr)
        return signals.exit_code
    error = outcome.get("error")
    if error is not None:
        log.error("job_failed", error=str(error))
        print(f"vfl-server: job failed: {error}", file=sys.stderr)
        return daemon.EXIT_JOB_FAILED
    summary = outcome["summary"]
    if args.psi_only:
        print(f"aligned IDs written to {summary.run_dir / 'aligned_ids.csv'} (and on every passive party)", flush=True)
        return daemon.EXIT_OK
    final = "  ".join(f"{k} {v:.4f}" for k, v in summary.final_metrics.items())
    how = "inference by the active party alone" if summary.artifact is not None else "federated inference"
    print(f"{how} on {len(active.schedule.test_rows)} held-out rows: {final}", flush=True)
    for line in summary_lines(summary.wire, own="server"):
        print(line, flush=True)
    print(f"checkpoints and reports: {summary.run_dir}", flush=True)
    if summary.artifact is not None:
        print(f"standalone model (serves with no passive party): {summary.artifact}", flush=True)
    if not serving.enabled or args.psi_only:
        return daemon.EXIT_OK
    return _serve(active, summary, serving, None if args.insecure else config.tls, args, server if federated else None)


def _serve(
    active: ActiveParty,
    summary: RunSummary,
    serving: ServingConfig,
    tls: TlsFiles | None,
    args: argparse.Namespace,
    federation_server: grpc.Server | None,
) -> int:
    """Serve the trained model until a signal: the artifact alone (APFed), or federated inference."""
    try:
        servable: Servable = (
            ArtifactServable(summary.artifact)
            if summary.artifact is not None
            else FederatedServable(active, degraded=serving.degraded)
        )
        serve_until(servable, serving, tls, active.stop_event, insecure=args.insecure, port_file=args.serving_port_file)
    except (OSError, VflError, ValueError) as exc:  # TlsConfigError is a ValueError
        log.error("serving_failed", error=str(exc))
        print(f"vfl-server: could not serve the model: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE if isinstance(exc, OSError) else daemon.EXIT_JOB_FAILED
    finally:
        if federation_server is not None:
            active.shutdown("the active party stopped serving")
            federation_server.stop(grace=5).wait()
    print("vfl-server: stopped serving", flush=True)
    return daemon.EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
