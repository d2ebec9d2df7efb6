"""A TCP proxy between one party and the server whose connections a test can cut, as a network would.

It relays bytes in both directions and nothing else: mutual TLS runs end to end through it, so
the proxy sees only ciphertext. ``cut()`` closes every relayed connection at once (a router
reboot, a NAT that forgot its mapping); new connections are relayed again at once, so the
party's own retries are what bring it back.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class CuttableProxy:
    """Listens on 127.0.0.1 (port 0) and relays every connection to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = threading.Event()
        #: How many times ``cut`` closed live connections.
        self.cuts = 0
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> int:
        """Close every relayed connection now; returns how many sockets were open."""
        with self._lock:
            victims, self._open = self._open, set()
            self.cuts += 1
        for sock in victims:
            _shut(sock)
        return len(victims)

    def close(self) -> None:
        self._closed.set()
        _shut(self._listener)
        self.cut()

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _shut(client)
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), name="proxy-pump", daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy bytes one way until either side closes; then close both, as a dead link would."""
        try:
            while chunk := source.recv(1 << 16):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            self._drop(source, sink)

    def _drop(self, source: socket.socket, sink: socket.socket) -> None:
        """Forget one relayed connection and close both of its sockets, as a dead link would."""
        with self._lock:
            self._open -= {source, sink}
        _shut(source)
        _shut(sink)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
