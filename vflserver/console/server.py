"""Serve the console over HTTPS to operator certificates only: aiohttp on its own event loop and thread.

Who may look. The console shows every job and party of the server, so it takes the Control API's
rule: an operator certificate (``vfl-certs operator NAME``) over mutual TLS, or nothing. The TLS
handshake requires a certificate the project CA signed; a party's or an inference caller's gets
403 on every route, with what to use instead. There is no login form and no cookie.

What every response carries: a Content-Security-Policy that allows only this origin's one script
and one stylesheet (no inline code, no frames, no form targets), ``Cache-Control: no-store``,
``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``.

Live updates. ``/events/<job>`` is a Server-Sent Events stream of the job's store events, the
same ones ``vfl-jobs watch`` follows; it carries only each event's sequence number, and the page
fetches itself again (``console.js``, at most once a second). Reading the store blocks, so every
page is built in a thread of the loop's executor.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from importlib import resources

import structlog
from aiohttp import web

from vflcore.errors import ConfigError, JobNotFound
from vflcore.security.identity import operator_from_der
from vflcore.security.tls import server_ssl_context
from vflserver.console import facts, pages
from vflserver.inference.app_loop import AppOnItsLoop
from vflserver.inference.config import split_listen
from vflserver.jobs.app import Service
from vflserver.jobs.store import ENDED

log = structlog.get_logger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
#: Connections open at once, and how long a TLS handshake may take.
MAX_CONNECTIONS, HANDSHAKE_TIMEOUT_S = 64, 10.0
#: How long one wait on the store lasts before the stream sends a keep-alive comment.
EVENT_WAIT_S = 15.0
_STATIC = {"console.js": "application/javascript", "console.css": "text/css"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def console_for(service: Service) -> ConsoleServer | None:
    """The console of ``service`` if its config enables it, bound (OSError if the address is taken); else None.

    ConfigError for a service without certificates (``--insecure``): the console is for operator
    certificates over mutual TLS, and has no plaintext mode.
    """
    settings = service.config.settings
    if not settings.console_enabled:
        return None
    tls = service.config.tls
    if tls is None or service.insecure:
        raise ConfigError(
            "[console] enabled = true needs the server's certificates: the console is served to operator "
            "certificates over mutual TLS only, and does not run with --insecure"
        )
    console: list[ConsoleServer] = []

    def listeners() -> dict[str, str]:
        found = service.listeners()
        if console:
            found["console (HTTPS)"] = f"{settings.console_listen.rpartition(':')[0]}:{console[0].port}"
        return found

    sources = facts.Sources(
        store=service.store,
        board=service.board,
        registry=service.registry,
        run_dir=settings.run_dir,
        version=facts.service_version(),
        started_at=time.time(),
        listeners=listeners,
        metrics_url=service.metrics_url,
    )
    console.append(ConsoleServer(split_listen(settings.console_listen), sources, server_ssl_context(tls)))
    return console[0]


def refusal(der: bytes | None) -> str | None:
    """Why a caller may not see the console (None: an operator may)."""
    if der and operator_from_der(der) is not None:
        return None
    return (
        "the console is for operator certificates only (vfl-certs operator NAME), as the Control API is; "
        "this certificate is a party's or an inference caller's"
    )


class ConsoleServer(AppOnItsLoop):
    """The console on ``address``, bound at construction (OSError then), served from ``start`` until ``stop``."""

    def __init__(self, address: tuple[str, int], sources: facts.Sources, tls: ssl.SSLContext) -> None:
        self.sources = sources
        self._closing = asyncio.Event()
        super().__init__(
            address,
            tls,
            name="console",
            max_connections=MAX_CONNECTIONS,
            handshake_timeout_s=HANDSHAKE_TIMEOUT_S,
            keepalive_timeout_s=30,
        )

    def start(self) -> None:
        super().start()
        log.info("console_started", port=self.port)

    def application(self) -> web.Application:
        app = web.Application(middlewares=[_guard])
        app.router.add_get("/", self._page(lambda: pages.jobs_page(facts.jobs(self.sources))))
        app.router.add_get("/jobs/{job_id}", self._job)
        app.router.add_get("/parties", self._page(lambda: pages.parties_page(facts.parties(self.sources))))
        app.router.add_get("/server", self._page(lambda: pages.server_page(facts.server(self.sources))))
        app.router.add_get("/events/{job_id}", self._events)
        app.router.add_get("/{name:console\\.(?:js|css)}", _static)
        return app

    def closing(self) -> None:
        self._closing.set()  # the event streams end at their next wait

    def _page(self, build: Callable[[], str]) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            html = await asyncio.get_running_loop().run_in_executor(None, build)
            return web.Response(text=html, content_type="text/html")

        return handler

    async def _job(self, request: web.Request) -> web.StreamResponse:
        job_id = request.match_info["job_id"]
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, facts.job, self.sources, job_id)
        except JobNotFound:
            return web.Response(status=404, text=pages.not_found(f"No job {job_id!r}."), content_type="text/html")
        return web.Response(text=pages.job_page(found), content_type="text/html")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """The job's events as SSE: ``data: <seq>`` each, ``event: end`` once it has ended."""
        job_id = request.match_info["job_id"]
        store, loop = self.sources.store, asyncio.get_running_loop()
        try:
            record = await loop.run_in_executor(None, store.get, job_id)
        except JobNotFound:
            return web.Response(status=404, text=f"no job {job_id!r}")
        response = web.StreamResponse(headers={**SECURITY_HEADERS, "Content-Type": "text/event-stream"})
        await response.prepare(request)
        seen = 0
        try:
            while not self._closing.is_set():
                wait = functools.partial(store.wait_for_events, job_id, seen, EVENT_WAIT_S)
                events = await loop.run_in_executor(None, wait)
                for event in events:
                    seen = event.seq
                    await response.write(f"data: {event.seq}\n\n".encode())
                if not events:
                    await response.write(b": still here\n\n")
                if (events and events[-1].state in ENDED) or (not events and record.state in ENDED):
                    await response.write(b"event: end\ndata: ended\n\n")
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Operators only; the security headers on every answer, a refusal included."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    refused = refusal(der)
    if refused is not None:
        log.warning("console_refused", path=request.path)
        response: web.StreamResponse = web.Response(status=HTTPStatus.FORBIDDEN, text=refused)
    else:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            response = web.Response(status=exc.status, text=exc.text or exc.reason)
    if not response.prepared:  # a stream set them itself before it started
        response.headers.update(SECURITY_HEADERS)
    return response


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    body = resources.files("vflserver.console").joinpath("static", name).read_bytes()
    return web.Response(body=body, content_type=_STATIC[name])


__all__ = ["SECURITY_HEADERS", "ConsoleServer", "console_for", "refusal"]
