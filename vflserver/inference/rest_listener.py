"""Accept REST connections for aiohttp under a cap, with TCP_NODELAY and a TLS handshake deadline.

aiohttp parses HTTP and exposes the caller's verified certificate to the routes, but it leaves
two things to whoever opens the socket, and both matter against a caller that holds
connections open on purpose:

- **A cap on connections.** ``ConnectionGate`` counts every accepted TCP connection, from the
  moment it is accepted (before any TLS), until it closes. Past ``max_connections`` a new one is
  closed at once, before its handshake costs any CPU.
- **A handshake deadline.** asyncio's ``start_tls`` aborts a handshake that takes longer than
  ``handshake_timeout_s``; a caller that connects and sends nothing, or one byte a minute, is
  gone after that, whether or not it has a certificate.

Each connection gets TCP_NODELAY: with Nagle's algorithm on, the response's last small segment
waits for the caller's delayed ACK and every request takes ~44 ms (BRIEF). Once the handshake is
done, the connection's protocol is aiohttp's request handler, reached through ``_Gate``, which
passes every event on and releases the connection's place when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)

#: What a handshake that fails raises, for any reason: a caller without a certificate, a
#: certificate of another CA, a plaintext client, the deadline, a reset.
_HANDSHAKE_FAILURES = (ssl.SSLError, OSError, TimeoutError, ConnectionError, asyncio.CancelledError)


class ConnectionGate:
    """The protocol factory for ``loop.create_server``: one ``_Gate`` per accepted connection."""

    def __init__(
        self,
        handler_factory: Callable[[], asyncio.Protocol],
        tls: ssl.SSLContext | None,
        *,
        max_connections: int,
        handshake_timeout_s: float,
    ) -> None:
        self.handler_factory = handler_factory
        self.tls = tls
        self.max_connections = max_connections
        self.handshake_timeout_s = handshake_timeout_s
        self.open: set[_Gate] = set()
        #: Connections closed at once because ``max_connections`` were open (for logs and tests).
        self.refused = 0

    def __call__(self) -> asyncio.Protocol:
        return _Gate(self)

    def close_all(self) -> None:
        """Abort every open connection (the endpoint is stopping)."""
        for gate in list(self.open):
            gate.abort()


class _Gate(asyncio.Protocol):
    """One accepted connection: counted, handshaken within the deadline, then aiohttp's."""

    def __init__(self, gate: ConnectionGate) -> None:
        self.gate = gate
        self.raw: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None  # the TLS transport once the handshake is done
        self.handler: asyncio.Protocol | None = None
        self._handshake: asyncio.Task[None] | None = None
        #: Bytes decrypted after the handshake but before ``start_tls`` returned (TLS 1.3 lets a
        #: caller send its request right behind its Finished message); replayed to the handler.
        self._early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        gate = self.gate
        if len(gate.open) >= gate.max_connections:
            gate.refused += 1
            if gate.refused == 1 or gate.refused % 1000 == 0:
                log.warning("rest_connection_refused", open=len(gate.open), refused=gate.refused)
            transport.abort()
            return
        gate.open.add(self)
        self.raw = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if gate.tls is None:
            self._hand_over(transport)
        else:
            # Nothing is read until start_tls has put its TLS layer in place (it resumes reading):
            # a ClientHello that arrived first must reach the handshake, not the HTTP parser.
            transport.pause_reading()
            self._handshake = asyncio.get_running_loop().create_task(self._start_tls(transport, gate.tls))

    async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                raw, self, context, server_side=True, ssl_handshake_timeout=self.gate.handshake_timeout_s
            )
        except _HANDSHAKE_FAILURES as exc:
            log.debug("rest_handshake_failed", error=repr(exc))
            raw.abort()
            self._release()
            return
        if tls is None:  # the caller closed during the handshake
            self._release()
            return
        self._hand_over(tls)

    def _hand_over(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.handler = self.gate.handler_factory()
        self.handler.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self.handler.data_received(data)

    def abort(self) -> None:
        if self._handshake is not None:
            self._handshake.cancel()
        for transport in (self.transport, self.raw):
            if transport is not None:
                transport.abort()
        self._release()

    def _release(self) -> None:
        self.gate.open.discard(self)

    # ---- events, passed on to aiohttp's handler once it has the connection ----------------------

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)
        else:
            self._early.append(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received() if self.handler is not None else None

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        if self.handler is not None:
            self.handler.connection_lost(exc)


def bind(address: tuple[str, int]) -> socket.socket:
    """The listening socket, bound now so that a taken address fails before anything starts."""
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
