"""What a caller may hold of the inference endpoint: connections, handshakes, request heads and bodies.

A real ``InferenceEndpoint`` on port 0 with the session's certificates. Attackers are raw
sockets that connect and then send too little: nothing, one byte of a TLS ClientHello, half a
request head, or a head whose body never comes. Meanwhile a certified caller must be served, and
every such connection must be closed by the server at its deadline.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from vflserver.inference.config import RestLimits, ServingConfig
from vflserver.inference.endpoint import InferenceEndpoint
from vflserver.inference.registry import ModelRegistry
from vfltesting.eventually import eventually
from vfltesting.pki import Pki
from vfltesting.servables import DigitsClassifier, digits_rows, triton_grpc_client

pytestmark = pytest.mark.integration

SLOW = 200
#: Short deadlines, so that a test waits seconds; the defaults are in ``RestLimits``.
LIMITS = RestLimits(handshake_timeout_s=1.0, header_timeout_s=1.0, body_timeout_s=1.0, max_body_bytes=1 << 20)
#: How long a connection the server must cut may stay open: the deadline, and room for a slow CPU.
CUT_WITHIN_S = 15.0


@pytest.fixture(scope="module")
def model() -> DigitsClassifier:
    return DigitsClassifier()


@contextmanager
def _endpoint(pki: Pki, model: DigitsClassifier, limits: RestLimits = LIMITS) -> Iterator[InferenceEndpoint]:
    config = ServingConfig(grpc_listen="127.0.0.1:0", rest_listen="127.0.0.1:0", rest_limits=limits)
    with InferenceEndpoint(ModelRegistry(model), config, pki.server_files()) as running:
        yield running


def _caller_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    files = pki.caller_files("test-caller")
    context.load_cert_chain(str(files.cert), str(files.key))
    return context


def _rest_infer(pki: Pki, port: int, rows: np.ndarray) -> list[int]:
    """One inference over HTTPS with the caller's certificate; the labels."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=_caller_context(pki), timeout=30)
    try:
        body = {
            "inputs": [
                {"name": "features", "shape": list(rows.shape), "datatype": "FP32", "data": rows.ravel().tolist()}
            ]
        }
        connection.request("POST", "/v2/models/digits/infer", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        document = json.loads(response.read())
        assert response.status == 200, document
        [label] = [output for output in document["outputs"] if output["name"] == "label"]
        return list(label["data"])
    finally:
        connection.close()


def _grpc_infer(pki: Pki, port: int, rows: np.ndarray) -> list[int]:
    files = pki.caller_files("test-caller")
    client = triton_grpc_client(port, files)
    try:
        tensor = triton_grpc.InferInput("features", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        return list(client.infer("digits", [tensor], client_timeout=30).as_numpy("label"))
    finally:
        client.close()


def _connect(port: int, first_bytes: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def _closed_by_server(sock: socket.socket, within_s: float = CUT_WITHIN_S) -> bytes:
    """Read until the server closes; returns what it sent. Fails if it is still open after ``within_s``."""
    sock.settimeout(within_s)
    received = b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return received
        except TimeoutError:
            break
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the server kept the connection open for {within_s} s; it sent {received[:200]!r}")


class TestSlowCallersWithoutACertificate:
    def test_they_do_not_stop_a_certified_caller_and_are_cut_at_the_handshake_deadline(
        self, pki: Pki, model: DigitsClassifier
    ) -> None:
        """200 connections on each port that send one byte of a ClientHello: a caller is served throughout."""
        rows = digits_rows(3)
        expected = list(model.reference(rows)["label"])
        with _endpoint(pki, model) as running, ExitStack() as stack:
            slow = []
            for port in (running.ports.rest, running.ports.grpc):
                for _ in range(SLOW):
                    sock = _connect(port, b"\x16")
                    stack.callback(sock.close)
                    slow.append(sock)
            assert _rest_infer(pki, running.ports.rest, rows) == expected
            assert _grpc_infer(pki, running.ports.grpc, rows) == expected
            rest_slow = slow[:SLOW]
            for sock in rest_slow:
                _closed_by_server(sock)  # the handshake deadline, not a read timeout of minutes
            assert _rest_infer(pki, running.ports.rest, rows) == expected


class TestSlowCallersWithACertificate:
    def test_half_a_head_or_half_a_body_is_cut_at_its_deadline(self, pki: Pki, model: DigitsClassifier) -> None:
        """200 certified connections: half stop inside the request head, half inside the body; all are cut."""
        context = _caller_context(pki)
        head = b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: vfl\r\n"
        # Their handshakes are the test's own, one after another: on a loaded host one took over the
        # 1 s handshake deadline (SSLEOFError, 2026-11-29), which is the test above's, not this one's.
        limits = replace(LIMITS, handshake_timeout_s=CUT_WITHIN_S)
        with _endpoint(pki, model, limits) as running, ExitStack() as stack:
            in_head, in_body = [], []
            for index in range(SLOW):
                raw = socket.create_connection(("127.0.0.1", running.ports.rest), timeout=10)
                sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
                stack.callback(sock.close)
                if index % 2:
                    sock.sendall(head)
                    in_head.append(sock)
                else:
                    sock.sendall(head + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"inputs"')
                    in_body.append(sock)
            assert _rest_infer(pki, running.ports.rest, digits_rows(1)) == list(
                model.reference(digits_rows(1))["label"]
            )
            for sock in in_head:
                _closed_by_server(sock)
            for sock in in_body:
                answer = _closed_by_server(sock)
                assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
                assert b"the body did not arrive within 1 s" in answer, answer


class TestConnectionCap:
    def test_past_the_cap_a_connection_is_closed_at_once(self, pki: Pki, model: DigitsClassifier) -> None:
        """max_connections = 20 and 20 open: the next is closed before its handshake; once they go, callers return."""
        limits = RestLimits(max_connections=20, handshake_timeout_s=60.0)
        with _endpoint(pki, model, limits) as running, ExitStack() as stack:
            held = [_connect(running.ports.rest) for _ in range(20)]
            for sock in held:
                stack.callback(sock.close)
            gate = running._rest.gate if running._rest is not None else None
            assert gate is not None
            # The server has accepted all 20: waited for, not assumed after a fixed pause.
            eventually(
                lambda: len(gate.open) >= 20,
                "the server to accept 20 connections",
                CUT_WITHIN_S,
                explain=lambda: f"it accepted {len(gate.open)}",
            )
            extra = _connect(running.ports.rest, b"\x16")
            stack.callback(extra.close)
            assert _closed_by_server(extra, within_s=5.0) == b""
            assert gate.refused >= 1
            for sock in held:
                sock.close()
            eventually(lambda: not gate.open, "the server to close the 20 connections", CUT_WITHIN_S, every=0.05)
            assert _rest_infer(pki, running.ports.rest, digits_rows(1)) == list(
                model.reference(digits_rows(1))["label"]
            )


@pytest.fixture(scope="module")
def running(pki: Pki, model: DigitsClassifier) -> Iterator[InferenceEndpoint]:
    with _endpoint(pki, model) as running:
        yield running


class TestBadBodies:
    def _post(self, pki: Pki, port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=_caller_context(pki), timeout=30)
        try:
            connection.putrequest("POST", "/v2/models/digits/infer")
            for key, value in headers.items():
                connection.putheader(key, value)
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    @pytest.mark.parametrize(
        ("body", "status", "words"),
        [
            (b"[" * 100_000 + b"]" * 100_000, 400, "nests JSON too deeply"),
            (b'{"inputs": [], "id": ' + b"9" * 5000 + b"}", 400, "a number too large"),
            (b"{" + b'"a": 1, ' * 10 + b"}", 400, "not valid JSON"),
        ],
    )
    def test_deep_or_huge_json_is_400(
        self, pki: Pki, running: InferenceEndpoint, body: bytes, status: int, words: str
    ) -> None:
        answer = self._post(pki, running.ports.rest, body, {"Content-Length": str(len(body))})
        assert answer[0] == status and words in answer[1]["error"], answer

    def test_a_chunked_body_is_411(self, pki: Pki, running: InferenceEndpoint) -> None:
        answer = self._post(pki, running.ports.rest, b"2\r\n{}\r\n0\r\n\r\n", {"Transfer-Encoding": "chunked"})
        assert answer[0] == 411 and "Content-Length" in answer[1]["error"], answer

    def test_a_body_over_the_limit_is_413_before_it_is_read(self, pki: Pki, running: InferenceEndpoint) -> None:
        sock = _caller_context(pki).wrap_socket(_connect(running.ports.rest), server_hostname="127.0.0.1")
        try:
            sock.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: vfl\r\nContent-Length: 2097152\r\n\r\n")
            answer = _closed_by_server(sock)  # nothing of the 2 MiB was sent
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"the limit is 1048576" in answer, answer
