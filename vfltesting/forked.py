"""Daemons forked from a launcher that has already imported torch: the suite pays start-up once.

Why: a ``vfl-server`` or ``vfl-client`` started with exec spends about 2.3 s of CPU before it does
any work: 1.1 s importing torch, 1.1 s importing ``torch._dynamo`` (every optimizer step needs it,
so the daemon's warm-up pays it), the rest in grpc, onnx and the project. The integration suite
started 153 daemons in one run, restarts included, on 2 cores: about 350 s of CPU, over a third of
the suite, spent importing the same modules again and again.

How: ``Launcher`` starts one process (``python -m vfltesting.forked``) that imports those modules
and waits. Each daemon is an ``os.fork()`` of it that sets its own stdio, directory and environment
and then runs the console script's ``main`` with the daemon's arguments, as ``vfl-server`` would
(or, for ``python -m <module>``, that module's ``main``: the privacy bench's recording party).
It is a real process with its own PID: kill -9, SIGSTOP, SIGTERM and its exit code work as for an
exec'd one. ``ForkedDaemon`` gives the test the part of ``subprocess.Popen`` it uses; the launcher
reaps its children and writes each exit code to a file, because only a parent can wait for a child.

One launcher serves a whole pytest-xdist run: the controller starts it (``Launcher.shared``) before
its workers, and each worker's ``Launcher.attached`` sends its requests over a Unix socket instead
of starting its own. Each launcher's start is about 7 CPU-s of imports (measured 2026-11-29), and
the suite's three workers each paid it. The launcher still ends with the process that started it.

What it skips is the interpreter's start and the imports, nothing else: configuration, warm-up,
TLS, the servers and the job all run in the child. The exec path stays covered by the tests that
start the commands themselves (``test_serving_alone``, ``test_devices``, ``test_own_models``, the
separate-hosts tests) and by ``make demo`` (in CI) and the benches.

Fork safety: the launcher has no Python thread and runs no torch operation before it forks (torch
starts its OpenMP and MKL threads at the first parallel operation, in the child). onnxruntime is
left out of the preload: it starts a native thread at import that a child would not have (the
project imports it at a daemon's first ONNX session, so the console scripts' modules are preloaded).
pandas and pyarrow are in it (0.45 s of each forked daemon's 1.1 s start-up CPU, measured
2026-11-28, about 240 daemon starts a suite run), although pyarrow's bundled jemalloc starts its
``jemalloc_bg_thd`` at import: that thread only purges jemalloc's own arenas, which pyarrow's
default pool (mimalloc) does not use, and jemalloc's fork handlers leave a child without it,
working; a child that built and freed Arrow tables and pandas frames for a while exited 0.

opacus's accountant is in it too: 1.6 CPU-s to import (it pulls scipy.stats), paid at a noisy job's
end by every daemon that reports ε (five starts in the privacy tests), once by the one launcher.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

#: Third-party modules a daemon imports, heaviest first. Not onnxruntime (see the module's docstring).
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch.export",
    "numpy",
    "grpc",
    "grpc.aio",
    "google.protobuf",
    "cryptography.x509",
    "onnx",
    "aiohttp",
    "structlog",
    "prometheus_client",
    "sqlite3",
    "pandas",
    "pyarrow.compute",
    "pyarrow.parquet",
    "opacus.accountants",
)

#: The console scripts a launcher can start, as ``pyproject.toml`` names them.
ENTRY_POINTS = {"vfl-server": "vflserver.cli", "vfl-client": "vflclient.cli"}

#: Where a test process finds the run's shared launcher (``Launcher.attached``): its socket's path.
SHARED_ENV = "VFL_TEST_LAUNCHER"
#: The shared launcher's socket, in its status folder (whose other files are named by PID).
SOCKET_NAME = "launcher.sock"
#: How long ``Launcher.attached`` waits for the shared launcher to listen: it may still be importing torch.
ATTACH_TIMEOUT_S = 120.0

#: How often a test process looks for a forked daemon's exit code (``ForkedDaemon.wait``).
REAP_EVERY_S = 0.01
#: The launcher reaps a child as soon as it ends (SIGCHLD wakes it); this is only its fallback.
#: Before, it woke every 10 ms to look: about 1 % of a core per test process, all session long.
LAUNCHER_WAKE_S = 1.0


class ForkedDaemon:
    """A daemon forked by a ``Launcher``: the ``subprocess.Popen`` methods the tests and ``localrun`` use."""

    def __init__(self, pid: int, args: Sequence[str], status: Path, launcher: Launcher) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._status = status
        self._launcher = launcher

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(FileNotFoundError):
                self.returncode = int(self._status.read_text())
            if self.returncode is None and not self._launcher.running():
                raise RuntimeError(f"the daemon launcher exited; {self.args[0]} (pid {self.pid}) cannot be waited for")
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(REAP_EVERY_S)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # not reaped yet, so the PID is still this daemon's
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """One pre-imported process, started at the first ``start``; ``close`` ends it and its children.

    ``Launcher.shared`` makes one that also listens on a Unix socket, for the test processes of a
    pytest-xdist run (``Launcher.attached``); those send their requests there and do not close it.
    """

    def __init__(self, env: Mapping[str, str], *, listen: bool = False, statuses: Path | None = None) -> None:
        """``statuses``: the folder a launcher writes exit codes to; a new one unless attaching to another's."""
        self._env = dict(env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._statuses = statuses or Path(tempfile.mkdtemp(prefix="vfl-forked-"))
        self._listen = listen
        #: A connection to another process's shared launcher (``attached``), instead of ``_proc``.
        self._peer: socket.socket | None = None
        self._peer_replies: IO[bytes] | None = None

    @classmethod
    def shared(cls, env: Mapping[str, str]) -> Launcher:
        """Start a launcher now that other test processes can use; its socket's path is ``address``."""
        launcher = cls(env, listen=True)
        launcher._ensure_started()
        return launcher

    @classmethod
    def attached(cls, address: str) -> Launcher:
        """Use the shared launcher listening at ``address`` (its ``address``); ``close`` only disconnects."""
        launcher = cls({}, statuses=Path(address).parent)
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while True:
            try:
                peer.connect(address)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    peer.close()
                    raise RuntimeError(f"no daemon launcher listens at {address} ({SHARED_ENV})") from None
                time.sleep(0.05)
        launcher._peer, launcher._peer_replies = peer, peer.makefile("rb")
        return launcher

    @property
    def address(self) -> str:
        """The socket a shared launcher listens on (``Launcher.attached``)."""
        return str(self._statuses / SOCKET_NAME)

    def running(self) -> bool:
        if self._peer is not None:  # the launcher never writes unasked: readable means it has gone
            readable, _, _ = select.select([self._peer], [], [], 0)
            return not readable or self._peer.recv(1, socket.MSG_PEEK) != b""
        return self._proc is not None and self._proc.poll() is None

    def start(
        self,
        command: Sequence[str],
        *,
        stderr: Path,
        append: bool,
        env: Mapping[str, str],
        cwd: Path,
        stdout: Path | None = None,
    ) -> ForkedDaemon:
        """Fork ``command`` (vfl-server, vfl-client or ``python -m <module>``, and its arguments); stderr to a
        file, stdout to ``stdout`` (a new file: for a test that reads what the daemon prints) or else to /dev/null."""
        module, argv = _main_of([str(a) for a in command])
        name = Path(argv[0]).name
        request = {
            "module": module,
            "argv": argv,
            "stderr": str(stderr),
            "stdout": None if stdout is None else str(stdout),
            "append": append,
            "env": dict(env),
            "cwd": str(cwd),
        }
        reply = self._ask(request)
        if not reply:
            raise RuntimeError(f"the daemon launcher exited instead of starting {name}")
        pid = int(reply["pid"])
        return ForkedDaemon(pid, command, self._statuses / str(pid), self)

    def _ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request to the launcher, over its socket or its pipe; its reply, or {} if it has gone."""
        line = json.dumps(request).encode() + b"\n"
        with self._lock:
            if self._peer is not None and self._peer_replies is not None:
                self._peer.sendall(line)
                reply = self._peer_replies.readline()
            else:
                proc = self._ensure_started()
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(line)
                proc.stdin.flush()
                reply = proc.stdout.readline()
        return dict(json.loads(reply)) if reply else {}

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            socket_path = [self.address] if self._listen else []
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "vfltesting.forked", str(self._statuses), *socket_path],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self._env,
            )
        return self._proc

    def close(self) -> None:
        """End the launcher: it kills any daemon still running (a test's own teardown stops them first).
        An attached one only disconnects: the shared launcher ends with the process that started it."""
        if self._peer is not None:
            if self._peer_replies is not None:
                self._peer_replies.close()
            self._peer.close()
            self._peer = self._peer_replies = None
            return
        if self._proc is not None:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc.stdout.close()
            self._proc = None
        for status in self._statuses.glob("*"):
            status.unlink()
        with contextlib.suppress(OSError):
            self._statuses.rmdir()

    def __enter__(self) -> Launcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def _main_of(command: list[str]) -> tuple[str, list[str]]:
    """The module whose ``main`` runs ``command``, and the ``sys.argv`` it gets: a console script of
    ``ENTRY_POINTS``, or ``python -m <module> ...`` (a daemon of the benches, such as
    ``bench.privacy.party``, whose ``main(argv)`` takes its arguments as the console scripts' does)."""
    name = Path(command[0]).name
    if name in ENTRY_POINTS:
        return ENTRY_POINTS[name], command
    if len(command) > 2 and command[1] == "-m":
        return command[2], command[2:]
    raise ValueError(f"the launcher starts {sorted(ENTRY_POINTS)} or python -m <module>, not {command[0]!r}")


# --- the launcher process -------------------------------------------------------------------------


def serve(statuses: Path, requests: int = 0, replies: IO[bytes] | None = None, listen: str | None = None) -> None:
    """Read one JSON request a line from fd ``requests`` (and from each connection to the Unix socket
    ``listen``, if given), fork it, reply with the PID on the same channel; reap children.

    Ends at end of ``requests`` (the test process that started it closed the pipe or died), killing
    children still running. A connection's end closes only that connection.
    """
    replies = replies or sys.stdout.buffer
    children: set[int] = set()
    # A child's end writes a byte to ``ended`` (a Python SIGCHLD handler and the wakeup fd): the
    # select below returns for it as for a request. Each daemon undoes both first (``_become``).
    ended, ended_w = _WAKE[:] = os.pipe()
    os.set_blocking(ended, False)
    os.set_blocking(ended_w, False)
    signal.set_wakeup_fd(ended_w)
    signal.signal(signal.SIGCHLD, _child_ended)
    listener = None
    if listen is not None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(listen)
        listener.listen()
        _WAKE.append(listener.fileno())
    #: Each channel's unfinished line and how to answer it, by the fd requests come in on.
    pending: dict[int, bytes] = {requests: b""}
    answer: dict[int, Callable[[bytes], object]] = {requests: lambda data: (replies.write(data), replies.flush())}
    peers: dict[int, socket.socket] = {}
    while True:
        watched = [*pending, ended, *([listener.fileno()] if listener is not None else [])]
        readable, _, _ = select.select(watched, [], [], LAUNCHER_WAKE_S)
        if ended in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(ended, 4096)
        _reap(children, statuses)
        if listener is not None and listener.fileno() in readable:
            peer, _ = listener.accept()
            peers[peer.fileno()] = peer
            pending[peer.fileno()] = b""
            answer[peer.fileno()] = peer.sendall
            _WAKE.append(peer.fileno())
        for fd in [fd for fd in pending if fd in readable]:
            chunk = os.read(fd, 65536)
            if not chunk:
                if fd == requests:
                    pending.clear()
                    break
                del pending[fd], answer[fd]
                _WAKE.remove(fd)
                peers.pop(fd).close()
                continue
            pending[fd] += chunk
            while b"\n" in pending[fd]:
                line, pending[fd] = pending[fd].split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _become(request)  # never returns
                children.add(pid)
                answer[fd](json.dumps({"pid": pid}).encode() + b"\n")
        if requests not in pending:
            break
    if listener is not None and listen is not None:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(listen)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while children:
        _reap(children, statuses)
        time.sleep(REAP_EVERY_S)


#: The launcher's SIGCHLD pipe (read end, write end), then its socket and connections: fds a forked daemon closes.
_WAKE: list[int] = []


def _child_ended(signum: int, frame: Any) -> None:
    """Nothing: that a SIGCHLD came is written to the launcher's wakeup fd, which wakes its select."""


def _reap(children: set[int], statuses: Path) -> None:
    """Write the exit code (``Popen.returncode``'s convention) of every child that has ended."""
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            partial = statuses / f".{pid}"
            partial.write_text(str(os.waitstatus_to_exitcode(status)))
            partial.rename(statuses / str(pid))


def _become(request: dict[str, Any]) -> None:
    """In the forked child: take the daemon's stdio, folder, environment and arguments, run it, exit."""
    code: Any = 1
    try:
        # The launcher's SIGCHLD wiring is not the daemon's: its own children (PSI pools) are its business.
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in _WAKE:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        if request.get("stdout"):
            out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.close(out)
        else:
            os.dup2(null, 1)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request["append"] else os.O_TRUNC)
        log = os.open(request["stderr"], flags, 0o644)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        main: Callable[[list[str]], int] = __import__(request["module"], fromlist=["main"]).main
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
    finally:
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        atexit._run_exitfuncs()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code or 0)


def _preload() -> None:
    for module in PRELOAD:
        __import__(module)
    # The console scripts' own modules too: about 0.24 CPU-s of a forked vfl-client's start and
    # 0.2 of a vfl-server's went to importing the project (measured 2026-11-29). They start no
    # thread at import since onnxruntime is imported at a daemon's first ONNX session, not before.
    for module in ENTRY_POINTS.values():
        __import__(module)
    if threading.active_count() != 1:
        raise RuntimeError(f"preloading started Python threads {threading.enumerate()}: forking would be unsafe")


if __name__ == "__main__":
    _preload()
    # Everything preloaded goes to the collector's permanent generation before the first fork, as
    # the gc module's documentation advises for fork without exec: a child's collections (its
    # warm-up's gc.collect, and every one after) then never walk the launcher's objects, and so
    # never write to their pages. Measured (2026-11-28, 2 cores): a forked vfl-client's start
    # fell from 0.56 to 0.36 CPU-s, a vfl-server's from 0.75 to 0.54; the suite forks about 240.
    gc.collect()
    gc.freeze()
    serve(Path(sys.argv[1]), listen=sys.argv[2] if len(sys.argv) > 2 else None)
