"""Run one job as the product runs it, for the benchmarks: vfl-server and vfl-client processes over mTLS.

``write_configs`` writes the server's and every party's TOML (certificates from
``vflcore.security.certs``, data from a folder of ``party{k}.csv``); ``run_federated`` starts the
daemons as separate OS processes on 127.0.0.1, waits for them, and returns the server's
``summary.json``. A failed job raises with the tail of every daemon's log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vflcore.job.spec import ROLES, JobSpec
from vfltesting.localrun import stop_all, wait_all, wait_for_port

BIN = Path(sys.executable).parent


def _toml_list(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _toml_value(value: Any) -> str:
    return json.dumps(value)  # numbers and strings: JSON and TOML agree


def write_configs(
    root: Path,
    job: JobSpec,
    *,
    certs: Path,
    data: Path,
    top_hidden: tuple[int, ...],
    top_dropout: float = 0.0,
    torch_threads: int = 1,
    party_factory: str = "",
    held_out_ids: Path | None = None,
) -> None:
    """``root/server.toml`` with the job, and ``root/party{k}.toml`` per passive party; runs go to ``root/runs``.

    ``party_factory`` ("module:callable") is every passive party's ``[model] factory``; "" leaves
    each party the job's MLP. ``held_out_ids`` is the active party's file of test IDs (None: the
    job's seeded ``test_fraction``).
    """
    run_dir = root / "runs"
    options = "".join(f"{key} = {_toml_value(value)}\n" for key, value in sorted(job.algorithm_options.items()))
    roles = "".join(
        f"{key} = {_toml_value(value)}\n"
        for role in ROLES
        for key in (f"{role}_optimizer", f"{role}_learning_rate", f"{role}_weight_decay")
        if (value := getattr(job, key)) is not None
    )
    model = f'\n[model]\nfactory = "{party_factory}"\n' if party_factory else ""
    (root / "server.toml").write_text(
        f"""[server]
listen = "127.0.0.1:0"
run_dir = "{run_dir}"
port_file = "{root / "port"}"
join_timeout_s = 120
step_timeout_s = 120
torch_threads = {torch_threads}

[tls]
ca = "{certs / "ca.pem"}"
cert = "{certs / "server.pem"}"
key = "{certs / "server.key"}"

[data]
path = "{data / "party1.csv"}"
label_column = "label"
{"" if held_out_ids is None else f'held_out_ids = "{held_out_ids}"'}

[job]
job_id = "{job.job_id}"
algorithm = "{job.algorithm}"
task = "{job.task}"
passive_parties = {_toml_list(job.passive_parties)}
seed = {job.seed}
epochs = {job.epochs}
batch_size = {job.batch_size}
embedding_dim = {job.embedding_dim}
bottom_hidden = {_toml_list(job.bottom_hidden)}
optimizer = "{job.optimizer}"
learning_rate = {job.learning_rate}
weight_decay = {job.weight_decay}
{roles}test_fraction = {job.test_fraction}
validation_fraction = {job.validation_fraction}
patience = {job.patience}
eval_every_rounds = {job.eval_every_rounds}
wire_codec = "{job.wire_codec}"

[algorithm]
{options}
[model]
top_hidden = {_toml_list(top_hidden)}
top_dropout = {top_dropout}
"""
    )
    for party in job.passive_parties:
        (root / f"party{party}.toml").write_text(
            f"""[client]
party = {party}
run_dir = "{run_dir}"
torch_threads = {torch_threads}

[tls]
ca = "{certs / "ca.pem"}"
cert = "{certs / f"party-{party}.pem"}"
key = "{certs / f"party-{party}.key"}"

[data]
path = "{data / f"party{party}.csv"}"
{model}"""
        )


def run_jobs(
    root: Path, jobs: list[JobSpec], *, certs: Path, data: Path, top_hidden: tuple[int, ...]
) -> Iterator[tuple[JobSpec, dict[str, Any]]]:
    """Run each job in its own folder under ``root``, one after the other; yield it with its summary."""
    for job in jobs:
        job_root = root / job.job_id
        job_root.mkdir()
        write_configs(job_root, job, certs=certs, data=data, top_hidden=top_hidden)
        yield job, run_federated(job_root, job)


def run_federated(
    root: Path,
    job: JobSpec,
    *,
    torch_threads: int = 1,
    timeout_s: float = 600.0,
    dial: Callable[[int, int], str] | None = None,
) -> dict[str, Any]:
    """Run the job written by ``write_configs`` as 1 + len(passive_parties) processes; return summary.json.

    ``dial(party, server_port)`` gives the address a passive party dials instead of the server's
    (an emulated WAN link in front of it, say); by default every party dials 127.0.0.1 directly.
    """
    logs = root / "logs"
    logs.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": str(torch_threads)}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    log_files = {"server": logs / "server.log"} | {f"party-{p}": logs / f"party-{p}.log" for p in job.passive_parties}
    codes: dict[str, int] = {}
    try:
        procs["server"] = subprocess.Popen(
            [str(BIN / "vfl-server"), "--once", "--config", str(root / "server.toml"), "--log-format", "json"],
            stdout=subprocess.DEVNULL,
            stderr=log_files["server"].open("wb"),
            env=env,
        )
        port = wait_for_port(root / "port", procs["server"], timeout_s=120)
        for party in job.passive_parties:
            procs[f"party-{party}"] = subprocess.Popen(
                [
                    str(BIN / "vfl-client"),
                    "--once",
                    *("--config", str(root / f"party{party}.toml"), "--party", str(party)),
                    *("--server", dial(party, port) if dial else f"127.0.0.1:{port}", "--log-format", "json"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log_files[f"party-{party}"].open("wb"),
                env=env,
            )
        codes = wait_all(procs, timeout_s)
    finally:
        stop_all(procs)  # also if starting one of them failed
    if any(codes.values()):
        tails = "\n".join(
            f"--- {name}:\n{path.read_text(errors='replace')[-2000:]}" for name, path in log_files.items()
        )
        raise RuntimeError(f"the federated job failed, exit codes {codes}\n{tails}")
    summary: dict[str, Any] = json.loads((root / "runs" / job.job_id / "party-1" / "summary.json").read_text())
    return summary
