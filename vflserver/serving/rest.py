"""The REST half of the inference endpoint: KServe v2 over HTTPS with the standard library.

``ThreadingHTTPServer`` gives one thread per connection; connections are HTTP/1.1 keep-alive,
and every accepted socket gets TCP_NODELAY, because with Nagle's algorithm on, the response's
last small segment waits for the client's delayed ACK and every request takes ~44 ms (BRIEF).
The TLS handshake runs in the connection's thread (``do_handshake_on_connect=False``), so a
caller that connects and stays silent cannot stall the accept loop. Routes, status codes and
bodies follow the KServe v2 REST API; errors are ``{"error": "..."}``.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import structlog

from vflcore.wire.oip import ProtocolError
from vflserver.serving.handler import Failure, InferenceHandler, failure
from vflserver.serving.json_wire import (
    HEADER_LENGTH,
    dump,
    infer_request_from_http,
    infer_response_to_http,
    model_metadata_to_json,
    server_metadata_to_json,
)

log = structlog.get_logger(__name__)

#: The largest request body accepted; larger ones get 413 before a byte is read.
MAX_BODY_BYTES = 64 << 20

#: A keep-alive connection with no request for this long is closed, and so is its thread.
IDLE_TIMEOUT_S = 60.0

_STATUS = {
    Failure.INVALID: HTTPStatus.BAD_REQUEST,
    Failure.NOT_FOUND: HTTPStatus.NOT_FOUND,
    Failure.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    Failure.INTERNAL: HTTPStatus.INTERNAL_SERVER_ERROR,
}

_GET_ROUTES = frozenset({"server", "live", "ready", "model", "model_ready"})


class RestServer(ThreadingHTTPServer):
    """An HTTPS (or, when ``tls`` is None, HTTP) server answering the KServe v2 REST routes."""

    daemon_threads = True
    block_on_close = False  # stop() closes the connections itself; see close_connections

    def __init__(self, address: tuple[str, int], handler: InferenceHandler, tls: ssl.SSLContext | None) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.handler = handler
        self.tls = tls
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Routes)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, peer = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        with self._open_lock:
            self._open.add(sock)
        return sock, peer

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End every open keep-alive connection, so its thread returns instead of waiting idle."""
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed by the peer
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed handshake or a vanished caller is routine; it must not print a traceback."""
        log.debug("rest_connection_error", peer=str(client_address), exc_info=True)


class _Routes(BaseHTTPRequestHandler):
    """One connection: parses each request, routes it, writes one response."""

    server: RestServer
    protocol_version = "HTTP/1.1"  # keep-alive
    server_version = "vfl-service"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S
    wbufsize = 1 << 16  # headers and body leave in one write, flushed after each request

    def setup(self) -> None:
        super().setup()  # applies the idle timeout
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def do_GET(self) -> None:
        route = self._route()
        if route is None:
            return
        kind, name, version = route
        if kind not in _GET_ROUTES:
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"use POST for {self.path}", allow="POST")
            return
        handler = self.server.handler
        try:
            if kind == "server":
                self._json(HTTPStatus.OK, server_metadata_to_json(handler.metadata))
            elif kind == "live":
                self._json(HTTPStatus.OK, {"live": handler.live()})
            elif kind == "ready":
                self._readiness(handler.ready())
            elif kind == "model":
                self._json(HTTPStatus.OK, model_metadata_to_json(handler.model_metadata(name, version)))
            else:
                self._readiness(handler.model_ready(name, version))
        except Exception as exc:
            self._failure(exc, kind)

    def do_POST(self) -> None:
        route = self._route()
        if route is None:
            return
        kind, name, version = route
        if kind != "infer":
            self._discard_body()
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"use GET for {self.path}", allow="GET")
            return
        body = self._body()
        if body is None:
            return
        try:
            header_length = self._header_length()
            request = infer_request_from_http(name, version, body, header_length)
            answer, json_length = infer_response_to_http(self.server.handler.infer(request))
        except Exception as exc:
            self._failure(exc, "infer")
            return
        if json_length is None:
            self._send(HTTPStatus.OK, answer, "application/json")
        else:
            self._send(HTTPStatus.OK, answer, "application/octet-stream", {HEADER_LENGTH: str(json_length)})

    # ---- pieces -----------------------------------------------------------------------------

    def _route(self) -> tuple[str, str, str] | None:
        """(kind, model, version) for a known path; otherwise answers 404 and returns None."""
        parts = [unquote(part) for part in urlsplit(self.path).path.strip("/").split("/")]
        route = _match(parts)
        if route is None:
            self._discard_body()
            self._error(HTTPStatus.NOT_FOUND, f"no endpoint {urlsplit(self.path).path}; the API is under /v2")
        return route

    def _body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not chunked")
            return None
        if self.headers.get("Content-Encoding", "identity").lower() != "identity":
            self._discard_body()
            self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "compressed request bodies are not supported")
            return None
        length = self._content_length()
        if length is None:
            return None
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the body stays unread, so the connection cannot be reused
            limit = f"the body is {length} bytes; the limit is {MAX_BODY_BYTES}"
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, limit)
            return None
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            return None
        return body

    def _content_length(self) -> int | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self._error(HTTPStatus.LENGTH_REQUIRED, "a POST needs a valid Content-Length header")
            return None
        return length

    def _discard_body(self) -> None:
        """Read and drop a body nobody will use, so the keep-alive connection stays in step."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if 0 <= length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _header_length(self) -> int | None:
        value = self.headers.get(HEADER_LENGTH)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise ProtocolError(f"{HEADER_LENGTH} must be an integer, got {value!r}") from None

    def _readiness(self, ready: bool) -> None:
        # KServe: 200 means ready; any 4xx means not (Triton and MLServer both answer 400).
        self._json(HTTPStatus.OK if ready else HTTPStatus.BAD_REQUEST, {"ready": ready})

    def _failure(self, exc: Exception, call: str) -> None:
        kind, message = failure(exc, call=f"REST {call}")
        self._error(_STATUS[kind], message)

    def _error(self, status: HTTPStatus, message: str, allow: str | None = None) -> None:
        self._send(status, dump({"error": message}), "application/json", {"Allow": allow} if allow else None)

    def _json(self, status: HTTPStatus, document: Any) -> None:
        self._send(status, dump(document), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on stderr: at a thousand requests a second that is the bottleneck."""

    def log_error(self, format: str, *args: Any) -> None:
        log.debug("rest_protocol_error", detail=format % args)


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
