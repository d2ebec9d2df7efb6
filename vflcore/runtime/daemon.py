"""What both daemons share at their entry points: exit codes, log flags (and the log file) and signal handling.

Exit codes (documented in docs/reference/cli.md, and tested against these constants):

    0    the job finished (or ``--check`` found nothing wrong)
    1    the job failed: a party went away, a peer reported an error, training diverged; or a
         stop did not end within 45 s of the signal (every thread's stack is written first)
    2    a config, data or certificate file is wrong; the message names it
    3    could not reach the server or serve on the address (network or TLS)
    4    the server refused this party (wrong certificate, not in the job, different data)
    130  stopped by SIGINT (Ctrl-C), after a clean shutdown
    143  stopped by SIGTERM, after a clean shutdown
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TextIO, cast

import structlog

from vflcore.errors import ConfigError
from vflcore.memory import keep_freed_memory
from vflcore.runtime.compute import ComputeEngine, connect
from vflcore.runtime.crash_trace import arm_stop_deadline, enable_crash_traces
from vflcore.runtime.log_file import LogFile, reopen_on_sighup
from vflcore.runtime.logs import configure_logging

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="log rendering: JSON lines, console, or auto (console on a terminal)",
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error (default: info)")


def add_log_file_flag(parser: argparse.ArgumentParser) -> None:
    """``--log-file PATH``, for the long-running daemons only (a one-off ``vfl-jobs`` has no use for it)."""
    parser.add_argument(
        "--log-file",
        type=Path,
        metavar="PATH",
        help="append the log lines (JSON) to this file instead of stderr, created with mode 0640; "
        "SIGHUP reopens it, for logrotate (see docs/how-to/systemd.md)",
    )


def setup_logging(args: argparse.Namespace) -> None:
    """Logs go to stderr, or to ``--log-file``, so stdout stays free for the results a person reads.

    Raises ConfigError, naming the file, if ``--log-file`` cannot be opened, and ValueError for an
    unknown ``--log-level``; the daemons exit 2 on either.
    """
    as_json = {"auto": None, "json": True, "console": False}[args.log_format]
    path: Path | None = getattr(args, "log_file", None)
    if path is None:
        configure_logging(json=as_json, level=args.log_level, stream=sys.stderr)
        return
    log_file = LogFile(path)
    # LogFile has the part of TextIO that structlog's PrintLogger and logging's StreamHandler use.
    configure_logging(json=as_json, level=args.log_level, stream=cast(TextIO, log_file))
    reopen_on_sighup(log_file)


def arm_crash_traces(args: argparse.Namespace, *, announce: bool = True) -> None:
    """A daemon that dies on SIGSEGV, SIGBUS, SIGABRT, SIGFPE or SIGILL writes every thread's stack
    to stderr and to ``--log-file`` (``vflcore.runtime.crash_trace``); call after ``setup_logging``.

    Logs ``crash_traces`` with where a trace would go, so an operator reading the log knows where
    to look after a crash; not with ``announce`` False, for a command whose output is a report
    (``vfl-client --check``), not a log. An OSError if the relay process cannot start (no process
    or descriptor left on the host): the daemons let it end them with its traceback, exit code 1.
    """
    where = enable_crash_traces(getattr(args, "log_file", None))
    if announce:
        structlog.get_logger(__name__).info("crash_traces", to=where)


class ShutdownSignals:
    """Turns SIGINT/SIGTERM into a call of ``on_signal`` and remembers the exit code to use.

    ``on_signal`` runs on a thread of its own, never inside the handler. Python runs a handler on
    the main thread between two bytecodes, wherever that thread is: CI caught it inside grpc's
    call creation (``_channel.py``, just past a lock), where the handler's ``channel.close()``
    then waited for that very call to finish, for ever (the stop deadline's stacks showed it).
    The handler only records the signal, arms the stop deadline and writes one byte to a pipe
    (``os.write``: no Python lock); the ``shutdown-signals`` thread, blocked reading the pipe,
    calls ``on_signal``.

    Nor does the stop wait for Python's handler at all. In CI a ``vfl-serve`` took no notice of
    SIGTERM for minutes (py-spy: the main thread in ``serve_until``'s ``Event.wait()``, the relay
    thread still reading): Python's handler had not run. Why was not found (a signal taken by
    another thread does not reproduce it here). So the pipe is also the interpreter's wakeup fd
    (``signal.set_wakeup_fd``), which CPython's C-level handler writes the signal's number to, in
    whichever thread took it, before any Python code runs: the relay thread wakes on that,
    records the signal and stops the daemon; Python's handler, if it runs, finds it recorded.
    """

    def __init__(self, on_signal: Callable[[], None]) -> None:
        self.exit_code: int | None = None
        self._on_signal = on_signal
        self._fired = False
        self._lock = threading.RLock()  # the handler may interrupt the main thread inside _record
        self._wake: int | None = None

    def install(self) -> ShutdownSignals:
        read_end, self._wake = os.pipe()
        os.set_blocking(self._wake, False)  # set_wakeup_fd's rule: the C handler must never block
        threading.Thread(target=self._relay, args=(read_end,), name="shutdown-signals", daemon=True).start()
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        signal.set_wakeup_fd(self._wake, warn_on_full_buffer=False)
        return self

    @property
    def fired(self) -> bool:
        return self._fired

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """Python's handler, on the main thread: the relay may have recorded the signal already."""
        self._record(signum)

    def _record(self, signum: int) -> bool:
        """Note the first stop signal (exit code, stop deadline); False if one was noted before."""
        with self._lock:
            if self._fired:
                return False
            self._fired = True
        self.exit_code = EXIT_SIGINT if signum == signal.SIGINT else EXIT_SIGTERM
        arm_stop_deadline()  # a stop that hangs leaves every thread's stack and exit 1, not a SIGKILL
        return True

    def _relay(self, read_end: int) -> None:
        stops = {int(signal.SIGINT), int(signal.SIGTERM)}
        while True:
            got = os.read(read_end, 64)
            signums = [b for b in got if b in stops]
            if signums:
                break
        self._record(signums[0])
        self._on_signal()


def leave(code: int, signals: ShutdownSignals) -> int:
    """``code``, or, after a stop signal, the process's end with ``code`` at once.

    Why not the interpreter's own exit after a signal: it joins every non-daemon thread, and a
    library's may never end. The one seen: the PSI pool's manager thread, waiting for the rest of
    a result from a worker killed mid-write (``ParallelBlinder.abandon``). The daemon's own work
    is done by then (connection closed, logs written with ``write(2)``, checkpoints on disk), so
    stdout and stderr are flushed and the process ends with ``os._exit``.
    """
    if not signals.fired:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def prepare_compute(torch_threads: int) -> None:
    """Settings every training process needs before its first step.

    torch's intra-op threads are capped at the configured ``torch_threads`` (a daemon often
    shares its host), and glibc keeps freed buffers for reuse (``vflcore.memory``). torch is
    imported here, not at module level, so that a config error is reported before the seconds
    torch takes to import.
    """
    import torch

    torch.set_num_threads(torch_threads)
    keep_freed_memory()


def check_device(device: str) -> None:
    """Refuse ``[compute] device`` at start if this host cannot provide it (not at the first step).

    A ConfigError that says what the host has and what to write instead; the daemons exit 2.
    """
    import torch

    if device == "cpu":
        return
    if not torch.cuda.is_available():
        built = torch.version.cuda or "none (a CPU-only build)"
        raise ConfigError(
            f"[compute] device = {device!r}, but this host has no usable CUDA GPU (torch {torch.__version__}, CUDA "
            f'{built}); set device = "cpu", or install a CUDA build of torch on a host with a GPU'
        )
    count = torch.cuda.device_count()
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        raise ConfigError(
            f"[compute] device = {device!r}, but this host has {count} CUDA device(s): cuda:0 to cuda:{count - 1}"
        )


def check_engine(engine: ComputeEngine) -> None:
    """Join the party's Ray cluster at start when ``[compute] engine = "ray"``, not at the first PSI.

    A cluster that is not there stops the daemon now with ConnectionError naming the address (an
    OSError: the daemons exit 3, as for a server they cannot reach), rather than failing a job later.
    """
    if engine.on_ray:
        connect(engine)


def adopt_torch_threads() -> None:
    """Give the calling thread the process's intra-op thread count; call it first in every compute thread.

    ``torch.set_num_threads`` reaches OpenMP and MKL only in the thread that calls it: another
    thread's first matmul runs with MKL's default (every core), which splits the same GEMM
    differently and so rounds differently. Measured on a 2-core AMD EPYC: a (10x64)@(64x16)
    product differs by 2e-6 between the main thread and a fresh one. That broke two promises:
    ``torch_threads`` did not hold in the job thread, and a federated run and its in-process
    reference, on different threads, did not agree to float32 rounding.
    """
    import torch

    torch.set_num_threads(torch.get_num_threads())


def run_compute_loop(loop: asyncio.AbstractEventLoop) -> None:
    """``loop.run_forever`` in a thread that computes like every other: the process's torch threads.

    The inference endpoints run a compute-only model's ``predict`` on their event loop's thread
    (no hop to a pool). Without this, that thread's first matmul ran with MKL's default thread
    count, so on a process whose torch threads had been set to one, seven digits rows came back
    1 ulp away from the same model run on the main thread (reproduced; it failed CI once).
    """
    adopt_torch_threads()
    loop.run_forever()
