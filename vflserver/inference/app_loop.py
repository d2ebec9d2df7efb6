"""An aiohttp application on its own event loop and thread, behind a ``ConnectionGate``: the server's HTTPS listeners.

Both of the server's HTTPS listeners, the inference endpoint's REST half and the operator's
console, live the same life: the socket is bound at construction (so a taken address is an
OSError in the caller's thread, before anything starts), the application is served from
``start`` on a thread of its own, and ``stop`` ends every connection and frees the port.
Subclasses say what the application is (``application``) and what else to end (``closing``,
``closed``).
"""

from __future__ import annotations

import asyncio
import ssl
import threading

from aiohttp import web

from vflcore.runtime.daemon import run_compute_loop
from vflserver.inference.rest_listener import ConnectionGate, bind

#: How long, at most, a connection answered before its body was read (a refusal) goes on reading
#: and dropping that body before it closes: aiohttp's own default (``lingering_time``). Closing
#: with unread bytes would reset the connection, and the caller might not read the answer.
LINGERING_S = 10.0


class AppOnItsLoop:
    """Serve ``application()`` on ``address`` (HTTPS with ``tls``; HTTP when it is None) from ``start`` to ``stop``."""

    def __init__(
        self,
        address: tuple[str, int],
        tls: ssl.SSLContext | None,
        *,
        name: str,
        max_connections: int,
        handshake_timeout_s: float,
        keepalive_timeout_s: float,
        lingering_s: float = LINGERING_S,
    ) -> None:
        self._sock = bind(address)
        self._tls = tls
        self._limits = (max_connections, handshake_timeout_s, keepalive_timeout_s)
        self._lingering_s = lingering_s
        #: The connections, once started: the cap and the handshake deadline.
        self.gate: ConnectionGate | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=run_compute_loop, args=(self._loop,), name=name, daemon=True)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        port: int = self._sock.getsockname()[1]
        return port

    def application(self) -> web.Application:
        """The routes to serve; called once, on the loop's thread, by ``start``."""
        raise NotImplementedError

    def closing(self) -> None:
        """Called on the loop's thread as ``stop`` begins, before the connections are ended."""

    def closed(self) -> None:
        """Called once the loop has stopped and the port is free."""

    def start(self) -> None:
        """Serve on the loop's thread until ``stop``."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()

    def stop(self) -> None:
        """Stop accepting, end every open connection, free the port. Safe to call twice."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()
        self._sock.close()
        self.closed()

    async def _start(self) -> None:
        max_connections, handshake_timeout_s, keepalive_timeout_s = self._limits
        runner = web.AppRunner(
            self.application(),
            handle_signals=False,
            access_log=None,
            keepalive_timeout=keepalive_timeout_s,
            lingering_time=self._lingering_s,
        )
        await runner.setup()
        assert runner.server is not None
        self.gate = ConnectionGate(
            runner.server, self._tls, max_connections=max_connections, handshake_timeout_s=handshake_timeout_s
        )
        self._runner = runner
        self._server = await self._loop.create_server(self.gate, sock=self._sock)

    async def _stop(self) -> None:
        self.closing()
        if self._server is not None:
            self._server.close()
        if self.gate is not None:
            self.gate.close_all()
        if self._runner is not None:
            await self._runner.cleanup()


__all__ = ["LINGERING_S", "AppOnItsLoop"]
