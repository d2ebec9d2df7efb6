"""A daemon that dies on SIGSEGV leaves a trace, and the job it was training survives the crash.

``vfl-server`` and two ``vfl-client`` daemons run as OS processes over mTLS (``vfltesting.service``),
each with ``--log-file``. With party 3 frozen inside an epoch of a SplitNN job, the server and party
2 get SIGSEGV, as a segfault in a C extension would end them. Each must die by that signal and
leave every thread's Python stack in its log file and on its stderr
(``vflcore.runtime.crash_trace``). Restarted, the server must say that its last run ended without a
clean stop and name the job it resumes (``unclean_stop``); the job must finish with the per-step
losses and weights of a run that never crashed, and its federated model must answer.
"""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from vflclient import InferenceClient, JobClient
from vflserver.inference.federated import IDS
from vfltesting.faults import CLIENT, EPOCHS, JOB, SERVER
from vfltesting.freeze import frozen_inside_epoch
from vfltesting.pki import Pki
from vfltesting.recovery import assert_same_model, job_outcome
from vfltesting.service import ServiceRun, finish_job, job_document, log_events, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

JOB_ID, CLEAN_ID = "crash-splitnn", "clean-splitnn"


def _service(root: Path, pki: Pki, data: Path, *, serving: bool) -> ServiceRun:
    """Every daemon at --log-level debug, as an operator chasing a crash would run it."""
    root.mkdir()
    return ServiceRun(
        root,
        pki,
        data,
        serving=serving,
        log_files=True,
        log_level="debug",
        server_settings=SERVER,
        client_settings=CLIENT,
    )


def _has_trace(path: Path, *, threads: bool) -> bool:
    """faulthandler's report: the fatal error, the crashing thread's stack and (``threads``) the other threads'."""
    text = path.read_text(errors="replace") if path.exists() else ""
    found = "Fatal Python error: Segmentation fault" in text and "Current thread 0x" in text
    return found and (not threads or "\nThread 0x" in text)


def _has_event(path: Path, event: str) -> bool:
    return bool(log_events(path, event))


def _segfault(run: ServiceRun, name: str) -> tuple[Path, Path]:
    """SIGSEGV to daemon ``name``; it must die by it. Returns its stderr file and its log file."""
    proc = run.procs[name]
    os.kill(proc.pid, signal.SIGSEGV)
    assert proc.wait(timeout=120) == -signal.SIGSEGV, run.tail()
    return run.logs[name], run.log_files_by_name[name]


def test_a_segfault_leaves_a_trace_and_the_job_resumes_to_the_same_model(
    pki: Pki, digits_data: Path, tmp_path: Path
) -> None:
    run = _service(tmp_path / "crash", pki, digits_data, serving=True)
    with run.started():
        for path in run.log_files_by_name.values():
            wait_until(functools.partial(_has_event, path, "crash_traces"), f"crash_traces in {path}", run)
            assert log_events(path, "crash_traces")[0]["to"] == f"{path} and stderr"
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            # The fault-free run first, on the same daemons under its own id (an id changes no seed
            # or row order): with a service of its own, this file took 30 CPU-s, 24 without (2026-11-29).
            jobs.submit(job_document(CLEAN_ID, "splitnn", epochs=EPOCHS, **JOB))
            finish_job(jobs, run, CLEAN_ID)
            reference = job_outcome(run.root / "runs", CLEAN_ID)
            jobs.submit(job_document(JOB_ID, "splitnn", epochs=EPOCHS, **JOB))
            # Party 3 frozen inside epoch 2 holds the training there while the others die, party 2
            # first: in the job, not yet in its reconnect loop.
            with frozen_inside_epoch(run, jobs, JOB_ID, 1):
                crashed = [_segfault(run, "party-2"), _segfault(run, "server")]
        # The relay copies a trace after its daemon died: wait for the files, not for a time. The
        # server has threads besides the crashing one (gRPC's, the job runner's): their stacks too.
        for files, threads in zip(crashed, (False, True), strict=True):
            for path in files:
                wait_until(functools.partial(_has_trace, path, threads=threads), f"the crash trace in {path}", run)

        run.start_server(f"127.0.0.1:{run.port}")
        run.start_client(2)
        [unclean] = log_events(run.log_files_by_name["server"], "unclean_stop")
        assert unclean["resuming"] == [JOB_ID], unclean
        assert unclean["level"] == "warning" and unclean["last_pid"] is not None
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            lines = finish_job(jobs, run, JOB_ID)
            assert any("resuming after" in line for line in lines), lines
            assert jobs.get(JOB_ID).served
        assert_same_model(job_outcome(run.root / "runs", JOB_ID), reference)

        grpc_port, _ = run.serving_ports()
        aligned = (run.root / "runs" / JOB_ID / "party-1" / "aligned_ids.csv").read_text().splitlines()[1:6]
        with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
            wait_until(
                lambda: client.model_ready(JOB_ID), "the resumed job's federated model to be ready", run, every_s=0.05
            )
            answer = client.infer(JOB_ID, {IDS: np.array([i.encode() for i in aligned], dtype=object)})
        assert len(answer["label"]) == len(aligned)
    # At debug, the libraries' own debug records stay out (VFL_LIBRARY_LOG_LEVEL lets them in):
    # grpc's asyncio "Loaded running loop" once filled most of a debug server's file.
    for path in run.root.glob("*.jsonl"):
        noise = [line for line in path.read_text().splitlines() if "Loaded running loop" in line or "findfont" in line]
        assert not noise, (path, noise[:3])
