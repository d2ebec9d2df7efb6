"""``vfl-serve``: serve a standalone model on the inference endpoints, with no federation at all.

    vfl-serve --model runs/<job>/party-1/model.onnx [--config server.toml] [--grpc-listen ...]

The model is what an APFed job (``apfed_r``, ``apfed_c``) leaves in the active party's run
folder: the active party's whole model as ONNX, which predicts from its own features. Nothing of
the training run is needed, and no passive party. ``--model`` also takes a Triton model
repository holding it (the same folder a stock Triton serves), or the legacy
``model.safetensors`` of runs made before ONNX (``vflserver.inference.onnx_model.load_servable``).
TLS files and the ``[serving]`` table come from the server config (``docs/reference/inference.md``); flags
override it.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
from pathlib import Path

import structlog

from vflcore.errors import ConfigError, VflError
from vflcore.runtime import cli_flags as flags
from vflcore.runtime import daemon
from vflcore.runtime.config import tls_files
from vflcore.security.tls import TlsConfigError
from vflserver.inference.config import serving_config_from
from vflserver.inference.onnx_model import load_servable
from vflserver.inference.run import serve_until

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vfl-serve", description="Serve a standalone model (KServe v2).")
    p.add_argument(
        "--model",
        type=Path,
        required=True,
        help="the model: runs/<job>/party-1/model.onnx, a Triton model repository holding it (the repository "
        "or its model folder), or a legacy model.safetensors",
    )
    p.add_argument(
        "--name",
        help="model name in requests (default: the model folder's name in a Triton repository, else the job id "
        "stored in the model)",
    )
    flags.add_config(p, "server TOML file: its [tls] and [serving] tables are used")
    flag = functools.partial(flags.add_config_flag, p)
    flag("--grpc-listen", ("serving", "grpc_listen"), help="gRPC address, e.g. 0.0.0.0:8001 (port 0 picks a free port)")
    flag("--rest-listen", ("serving", "rest_listen"), help="REST address, e.g. 0.0.0.0:8000")
    flag(
        "--client-auth",
        ("serving", "client_auth"),
        choices=("required", "optional"),
        help="must callers show a certificate",
    )
    flags.add_tls_files(
        p,
        ca="CA that signs callers' certificates (default: certs/ca.pem)",
        cert="this endpoint's certificate (default: certs/server.pem)",
        key="its private key (default: certs/server.key)",
    )
    p.add_argument("--port-file", type=Path, help="write 'grpc_port rest_port' here once listening")
    flags.add_insecure(p)
    daemon.add_logging_flags(p)
    daemon.add_log_file_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        daemon.setup_logging(args)
    except (ConfigError, ValueError) as exc:  # --log-file cannot be opened, or an unknown --log-level
        print(f"vfl-serve: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    daemon.arm_crash_traces(args)  # before anything that could crash: a trace, not silence
    try:
        document = flags.document(args)
        serving = serving_config_from(document, args.config)
        tls = None if args.insecure else tls_files(document, args.config, "server")
        servable = load_servable(args.model, name=args.name)
    except (ConfigError, TlsConfigError, VflError, ValueError) as exc:
        print(f"vfl-serve: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    daemon.prepare_compute(1)  # batch-1 requests: one intra-op thread answers fastest
    stop = threading.Event()
    signals = daemon.ShutdownSignals(stop.set).install()
    try:
        serve_until(servable, serving, tls, stop, insecure=args.insecure, port_file=args.port_file)
    except (OSError, VflError, TlsConfigError) as exc:
        print(f"vfl-serve: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE if isinstance(exc, OSError) else daemon.EXIT_CONFIG
    log.info("stopped", signal_exit_code=signals.exit_code)
    return daemon.EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
