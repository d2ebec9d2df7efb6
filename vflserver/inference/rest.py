"""The REST half of the inference endpoint: KServe v2 over HTTPS, served by aiohttp on its own event loop.

Why aiohttp: it is a maintained HTTP server that hands the route the connection's transport, so
the caller's verified certificate can decide what it may call (``request.transport`` →
``ssl_object``). uvicorn 0.54 and hypercorn 0.18 do not expose the client certificate to the
application at all. aiohttp parses requests in C, caps header lines and fields, and caps the body
(``client_max_size``). What it leaves to the socket's owner, ``rest_listener.ConnectionGate``
adds: a cap on connections and a TLS handshake deadline.

The limits, each a ``[serving]`` key (``RestLimits``):

- ``max_connections``: open connections, counted from accept; more are closed at once.
- ``handshake_timeout_s``: a TLS handshake not done by then is aborted.
- ``header_timeout_s``: a connection must deliver a whole request head within this long of
  connecting, or of its last response (aiohttp's keep-alive timer, which it arms at connect and
  which closes a connection that has no complete request by then); an idle keep-alive
  connection is closed after it too.
- ``body_timeout_s``: the body must arrive within this long of the head (408 otherwise).
- ``max_body_bytes``: a larger Content-Length gets 413 before a byte of the body is read.

A body the answer did not read (a 408, a 413, a refusal) is read and dropped for at most
``body_timeout_s`` more before the connection closes (aiohttp's lingering close, 10 s by
default), so that the caller can read the answer: a caller that sends no body holds its
connection no longer than the deadline it was given.

Chunked bodies get 411 and compressed ones 415. Routes, status codes and bodies follow the
KServe v2 REST API, with Triton's binary tensor extension; errors are ``{"error": "..."}``.
Inference runs on the loop only for a model whose ``predict`` just computes, with a small
body; anything else (federated inference waits on passive parties; a large JSON body takes a
while to parse) runs in a thread pool, so one slow request never stalls the others.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from concurrent import futures
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit

import structlog
from aiohttp import web

from vflcore.runtime.daemon import adopt_torch_threads
from vflcore.security.identity import party_from_der
from vflcore.status import http_status
from vflcore.wire.oip import InferRequest, ProtocolError
from vflserver.inference.access import refusal
from vflserver.inference.app_loop import LINGERING_S, AppOnItsLoop
from vflserver.inference.config import RestLimits
from vflserver.inference.handler import InferenceHandler, failure
from vflserver.inference.json_wire import (
    HEADER_LENGTH,
    dump,
    infer_request_from_http,
    infer_response_to_http,
    model_metadata_to_json,
    server_metadata_to_json,
)

log = structlog.get_logger(__name__)


#: Requests run in a thread unless the model computes inline and the body is at most this big.
INLINE_BODY_BYTES = 64 << 10

#: Threads for requests that may wait or take long: this many run at once, the rest queue.
BLOCKING_WORKERS = 16

_GET_ROUTES = frozenset({"server", "live", "ready", "model", "model_ready"})


class RestServer(AppOnItsLoop):
    """An HTTPS (or, when ``tls`` is None, HTTP) server answering the KServe v2 REST routes."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: InferenceHandler,
        tls: ssl.SSLContext | None,
        limits: RestLimits | None = None,
        *,
        allow_parties: bool = False,
    ) -> None:
        self.handler = handler
        self.limits = limits or RestLimits()
        self._routes = _Routes(handler, self.limits, allow_parties=allow_parties)
        super().__init__(
            address,  # bound now: OSError in the caller's thread if the address is taken
            tls,
            name="oip-rest",
            max_connections=self.limits.max_connections,
            handshake_timeout_s=self.limits.handshake_timeout_s,
            keepalive_timeout_s=self.limits.header_timeout_s,
            lingering_s=min(LINGERING_S, self.limits.body_timeout_s),
        )

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body_bytes)
        # [\s\S], not ".": a path with an encoded line break (%0A) must reach the same JSON 404 (issue 41)
        app.router.add_route("*", "/{path:[\\s\\S]*}", self._routes.dispatch)
        return app

    def closed(self) -> None:
        self._routes.pool.shutdown(wait=False, cancel_futures=True)


class _Routes:
    """Routes each request to the handler, and writes the answer or the error."""

    def __init__(self, handler: InferenceHandler, limits: RestLimits, *, allow_parties: bool) -> None:
        self.handler = handler
        self.limits = limits
        self.allow_parties = allow_parties
        self.pool = futures.ThreadPoolExecutor(
            max_workers=BLOCKING_WORKERS, thread_name_prefix="oip-rest", initializer=adopt_torch_threads
        )

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        refused = refusal(_party_of(request), allow_parties=self.allow_parties)
        if refused is not None:
            return _error(HTTPStatus.FORBIDDEN, refused, close=True)
        route = _match([unquote(part) for part in urlsplit(request.raw_path).path.strip("/").split("/")])
        if route is None:
            return _error(HTTPStatus.NOT_FOUND, f"no endpoint {request.path}; the API is under /v2")
        kind, name, version = route
        if request.method == "GET":
            if kind not in _GET_ROUTES:
                return _error(HTTPStatus.METHOD_NOT_ALLOWED, f"use POST for {request.path}", allow="POST")
            return self._get(kind, name, version)
        if request.method == "POST":
            if kind != "infer":
                return _error(HTTPStatus.METHOD_NOT_ALLOWED, f"use GET for {request.path}", allow="GET")
            return await self._infer(request, name, version)
        allowed = "POST" if kind == "infer" else "GET"
        return _error(HTTPStatus.METHOD_NOT_ALLOWED, f"use {allowed} for {request.path}", allow=allowed)

    def _get(self, kind: str, name: str, version: str) -> web.Response:
        handler = self.handler
        try:
            if kind == "server":
                return _json(HTTPStatus.OK, server_metadata_to_json(handler.metadata))
            if kind == "live":
                return _json(HTTPStatus.OK, {"live": handler.live()})
            if kind == "ready":
                return _readiness(handler.ready())
            if kind == "model":
                return _json(HTTPStatus.OK, model_metadata_to_json(handler.model_metadata(name, version)))
            return _readiness(handler.model_ready(name, version))
        except Exception as exc:
            return _failure(exc, kind)

    async def _infer(self, request: web.Request, name: str, version: str) -> web.StreamResponse:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        work = _answer_for(self.handler, name, version, body, request.headers.get(HEADER_LENGTH))
        try:
            if len(body) <= INLINE_BODY_BYTES and self.handler.computes_inline(name, version):
                answer, json_length = work()
            else:
                answer, json_length = await asyncio.get_running_loop().run_in_executor(self.pool, work)
        except Exception as exc:
            return _failure(exc, "infer")
        if json_length is None:
            return _response(HTTPStatus.OK, answer, "application/json")
        return _response(HTTPStatus.OK, answer, "application/octet-stream", {HEADER_LENGTH: str(json_length)})

    async def _body(self, request: web.Request) -> bytes | web.Response:
        """The whole body, or the response that refuses it (the connection closes where it cannot be reused)."""
        if "chunked" in request.headers.get("Transfer-Encoding", "").lower():
            return _error(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not chunked", close=True)
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            return _error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "compressed request bodies are not supported", close=True)
        length = request.content_length
        if length is None:
            return _error(HTTPStatus.LENGTH_REQUIRED, "a POST needs a valid Content-Length header", close=True)
        limit = self.limits.max_body_bytes
        if length > limit:
            return _error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is {length} bytes; the limit is {limit}", close=True
            )
        try:
            return await asyncio.wait_for(request.read(), self.limits.body_timeout_s)
        except TimeoutError:
            seconds = self.limits.body_timeout_s
            return _error(HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {seconds:g} s", close=True)


def _answer_for(
    handler: InferenceHandler, name: str, version: str, body: bytes, header_length: str | None
) -> Callable[[], tuple[bytes, int | None]]:
    """The whole of one inference, parse to serialised answer, as one call (on the loop or in a thread)."""

    def work() -> tuple[bytes, int | None]:
        ask: InferRequest = infer_request_from_http(name, version, body, _header_length(header_length))
        return infer_response_to_http(handler.infer(ask))

    return work


def _party_of(request: web.Request) -> int | None:
    """The party the caller's verified certificate names; None for any other caller, or plaintext."""
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return party_from_der(der) if der else None


def _header_length(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ProtocolError(f"{HEADER_LENGTH} must be an integer, got {value!r}") from None


def _readiness(ready: bool) -> web.Response:
    # KServe: 200 means ready; any 4xx means not (Triton and MLServer both answer 400).
    return _json(HTTPStatus.OK if ready else HTTPStatus.BAD_REQUEST, {"ready": ready})


def _failure(exc: Exception, call: str) -> web.Response:
    code, message = failure(exc, call=f"REST {call}")
    return _error(http_status(code), message)


def _error(status: HTTPStatus, message: str, *, allow: str | None = None, close: bool = False) -> web.Response:
    response = _response(status, dump({"error": message}), "application/json", {"Allow": allow} if allow else None)
    if close:
        response.force_close()
    return response


def _json(status: HTTPStatus, document: Any) -> web.Response:
    return _response(status, dump(document), "application/json")


def _response(
    status: HTTPStatus, body: bytes, content_type: str, headers: dict[str, str] | None = None
) -> web.Response:
    response = web.Response(status=status, body=body, headers=headers)
    response.content_type = content_type
    return response


def _match(parts: list[str]) -> tuple[str, str, str] | None:
    """Route a path's segments to (kind, model name, version)."""
    if parts == ["v2"]:
        return "server", "", ""
    if len(parts) == 3 and parts[:2] == ["v2", "health"] and parts[2] in ("live", "ready"):
        return parts[2], "", ""
    if len(parts) < 3 or parts[:2] != ["v2", "models"] or not parts[2]:
        return None
    name, rest, version = parts[2], parts[3:], ""
    if len(rest) >= 2 and rest[0] == "versions":
        version, rest = rest[1], rest[2:]
    kinds = {(): "model", ("ready",): "model_ready", ("infer",): "infer"}
    kind = kinds.get(tuple(rest))
    return None if kind is None else (kind, name, version)
