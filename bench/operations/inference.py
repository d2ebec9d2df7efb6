"""Inference endpoint latency and throughput: 8 concurrent callers at batch 1, gRPC then REST, over mTLS.

The server is the product's ``InferenceEndpoint`` in its own process, serving a digits-sized MLP
(``features`` FP32 [-1, 24] -> 64 -> 10; outputs ``probabilities`` FP32 [-1, 10] and ``label``
INT64 [-1]) exported as a standalone ONNX model, as an APFed job leaves it, and laid out as a
Triton model repository; ``load_servable`` runs it with onnxruntime on one thread, as
``vfl-server`` and ``vfl-serve`` run a standalone model. Each caller is a separate process,
so callers do not share the server's GIL (they do share the machine's two cores with it). Every
caller holds one connection and sends requests back to back, one at a time, for 30 s (``--seconds``):

- gRPC: ``inference.GRPCInferenceService/ModelInfer`` with the tensor in ``raw_input_contents``.
  Requests are serialised before the clock starts (64 different rows, cycled) and each reply is
  parsed and checked for its two outputs, so the figure is the server's cost plus a lean client.
- REST: ``POST /v2/models/digits/infer`` with a JSON tensor on an HTTPS keep-alive connection
  (``http.client``, the way curl or a small script would call it); each reply is parsed as JSON.

Before timing, the answers of both endpoints are checked against the ONNX model run in-process.
Latency is per request, measured by the caller; p50 and p99 are over every request of every
caller. Errors are non-OK statuses and malformed replies. The hypervisor's CPU steal over each
phase is printed too (``bench.common.machine``): this virtual machine is noisy.

A third phase repeats gRPC while another process holds ``SLOW_CONNECTIONS`` connections open
with no certificate, half on each port, the way a slowloris attack does: each sends one byte of
a TLS ClientHello a second, and is opened again as soon as the server cuts it (the REST
endpoint's handshake deadline). It prints that phase's p99 against the quiet gRPC phase's; aim
for at most ``SLOW_P99_RATIO`` times. Callers present caller certificates: the endpoint refuses
party certificates by default.

Last line: ``BENCH inference_grpc_p99 <ms> ms target <= 10 MET|MISSED``; MET needs p99 <= 10 ms,
at least 1000 requests/s and no errors over gRPC. The exit code is 0 either way, 1 only if the
bench itself could not run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, TypeVar

import grpc
import numpy as np

from bench.common.machine import Window, measured, process_cpu_seconds
from bench.common.versions import versions_line
from vflcore.proto import open_inference_pb2 as pb
from vflcore.security.tls import TlsFiles, channel_credentials
from vflcore.wire.oip import method
from vfltesting.pki import issue_pki

T = TypeVar("T")

CALLERS = 8
DURATION_S = 30.0
WARMUP_REQUESTS = 200
FEATURES, HIDDEN, CLASSES = 24, (64,), 10
MODEL = "digits"
TARGET_P99_MS = 10.0
TARGET_RPS = 1000.0
DISTINCT_ROWS = 64
SLOW_CONNECTIONS = 200
SLOW_P99_RATIO = 2.0


@dataclass(frozen=True)
class PhaseResult:
    """What every caller of one protocol measured."""

    protocol: str
    seconds: float
    latencies_ms: np.ndarray
    errors: int
    window: Window
    server_cpu_s: float | None  # the server process's CPU over the timed phase
    callers_cpu_s: float  # all callers' CPU over the timed phase

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.seconds

    def line(self) -> str:
        p50, p99 = np.percentile(self.latencies_ms, [50, 99]) if len(self.latencies_ms) else (float("nan"),) * 2
        steal = "n/a" if self.window.steal is None else f"{self.window.steal:.2f}"
        count = max(len(self.latencies_ms), 1)
        server = "n/a" if self.server_cpu_s is None else f"{1e6 * self.server_cpu_s / count:.0f}"
        return (
            f"{self.protocol:<5} {len(self.latencies_ms):>7} requests in {self.seconds:.0f} s  {self.rps:8.1f} req/s  "
            f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  max {self.latencies_ms.max():7.2f} ms  errors {self.errors}\n"
            f"      CPU per request: server {server} µs, callers {1e6 * self.callers_cpu_s / count:.0f} µs; "
            f"over the phase, hypervisor steal {steal} CPUs, other processes {self._others()} CPUs"
        )

    def _others(self) -> str:
        """CPUs that neither the server nor the callers used (other work on this shared machine)."""
        if self.window.busy is None or self.server_cpu_s is None:
            return "n/a"
        ours = (self.server_cpu_s + self.callers_cpu_s) / self.window.wall_s
        return f"{max(0.0, self.window.busy - ours):.2f}"


# ---- the server process -------------------------------------------------------------------------


def export_digits(folder: Path) -> Path:
    """Export the seeded digits MLP as a standalone ONNX model and lay it out as a Triton repository.

    The graph ends in softmax and argmax, with the metadata ``info_metadata`` writes: the same
    contract as the ``model.onnx`` an APFed job leaves. Returns the repository root, which both
    ``load_servable`` (here) and a stock Triton (``tritonserver --model-repository``) serve.
    """
    import torch  # only the main process (export and answer check) and the server pay for importing torch

    from vflcore.ml.models import build_seeded, mlp
    from vflcore.ml.onnx_export import MODEL_FILE, OnnxPart, export_onnx
    from vflserver.inference.artifact import ArtifactInfo
    from vflserver.inference.onnx_model import info_metadata
    from vflserver.inference.triton_repository import write_triton_repository

    # Frozen: the exporter traces the weights as constants, which it refuses to do with gradients on.
    network = build_seeded(lambda: mlp(FEATURES, HIDDEN, CLASSES), 0).eval().requires_grad_(False)

    def forward(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = network(features)
        return torch.softmax(logits, dim=1), logits.argmax(dim=1)

    info = ArtifactInfo(
        model_name=MODEL,
        job_id="bench-inference",
        algorithm="apfed_c",
        task="classification",
        feature_names=tuple(f"pixel{i}" for i in range(FEATURES)),
        num_outputs=CLASSES,
    )
    part = OnnxPart(
        forward,
        {"features": torch.from_numpy(_rows(seed=7))},
        ("probabilities", "label"),
        metadata=info_metadata(info),
    )
    model = folder / MODEL_FILE
    export_onnx(part, model)
    write_triton_repository(model, folder / "repository", MODEL)
    return folder / "repository"


def serve(repository: Path, tls: TlsFiles, ports: Connection, stop: Event) -> None:
    """The server process: the inference endpoint on two free loopback ports until ``stop``."""
    from vflcore.runtime.daemon import prepare_compute
    from vflcore.runtime.logs import configure_logging
    from vflserver.inference.config import ServingConfig
    from vflserver.inference.endpoint import InferenceEndpoint
    from vflserver.inference.onnx_model import load_servable
    from vflserver.inference.registry import ModelRegistry

    prepare_compute(1)
    configure_logging(level="warning")  # as vfl-server logs; a failed handshake is a debug line
    config = ServingConfig(grpc_listen="127.0.0.1:0", rest_listen="127.0.0.1:0")
    with InferenceEndpoint(ModelRegistry(load_servable(repository)), config, tls) as endpoint:
        ports.send((endpoint.ports.grpc, endpoint.ports.rest))
        stop.wait()


# ---- the callers --------------------------------------------------------------------------------


def _rows(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 17, size=(DISTINCT_ROWS, FEATURES)).astype(np.float32)


def _grpc_requests(seed: int) -> list[bytes]:
    requests = []
    for row in _rows(seed):
        msg = pb.ModelInferRequest(model_name=MODEL, raw_input_contents=[row.tobytes()])
        msg.inputs.add(name="features", datatype="FP32", shape=[1, FEATURES])
        requests.append(msg.SerializeToString())
    return requests


def _rest_bodies(seed: int) -> list[bytes]:
    return [
        json.dumps(
            {"inputs": [{"name": "features", "shape": [1, FEATURES], "datatype": "FP32", "data": row.tolist()}]}
        ).encode()
        for row in _rows(seed)
    ]


def grpc_caller(port: int, tls: TlsFiles, seed: int, seconds: float, go: Event, results: Connection) -> None:
    """One gRPC caller: warm up, wait for the start, then call back to back for ``seconds``."""
    channel = grpc.secure_channel(f"127.0.0.1:{port}", channel_credentials(tls))
    infer = channel.unary_unary(
        method("ModelInfer"), request_serializer=None, response_deserializer=pb.ModelInferResponse.FromString
    )
    requests = _grpc_requests(seed)

    def call(request: bytes) -> bool:
        try:
            reply = infer(request, timeout=10)
        except grpc.RpcError:
            return False
        return len(reply.raw_output_contents) == 2

    try:
        _timed_calls(call, requests, seconds, go, results)
    finally:
        channel.close()


def _timed_calls(
    call: Callable[[T], bool], requests: Sequence[T], seconds: float, go: Event, results: Connection
) -> None:
    """Warm up, report ready, wait for the start signal, then call for ``seconds``; send the latencies back."""
    latencies: list[float] = []
    errors = 0
    for i in range(WARMUP_REQUESTS):
        call(requests[i % DISTINCT_ROWS])
    results.send("warm")
    go.wait()
    cpu, deadline = time.process_time(), time.perf_counter() + seconds
    i = 0
    while (start := time.perf_counter()) < deadline:
        ok = call(requests[i % DISTINCT_ROWS])
        latencies.append(time.perf_counter() - start)
        errors += not ok
        i += 1
    results.send((latencies, errors, time.process_time() - cpu))


def rest_caller(port: int, tls: TlsFiles, seed: int, seconds: float, go: Event, results: Connection) -> None:
    """One REST caller on one HTTPS keep-alive connection, like ``grpc_caller``."""
    context = ssl.create_default_context(cafile=str(tls.ca))
    context.load_cert_chain(str(tls.cert), str(tls.key))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    bodies = _rest_bodies(seed)
    headers = {"Content-Type": "application/json"}

    def call(body: bytes) -> bool:
        try:
            connection.request("POST", f"/v2/models/{MODEL}/infer", body, headers)
            response = connection.getresponse()
            reply = json.loads(response.read())
        except (OSError, http.client.HTTPException, ValueError):
            connection.close()  # reconnects on the next request
            return False
        return response.status == 200 and len(reply["outputs"]) == 2

    try:
        _timed_calls(call, bodies, seconds, go, results)
    finally:
        connection.close()


def run_phase(protocol: str, port: int, callers_tls: list[TlsFiles], seconds: float, server_pid: int) -> PhaseResult:
    """Start CALLERS processes, let them warm up, time them together, collect their latencies."""
    ctx = multiprocessing.get_context("spawn")
    target = grpc_caller if protocol == "gRPC" else rest_caller
    go = ctx.Event()
    pipes, procs = [], []
    for index in range(CALLERS):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(port, callers_tls[index % len(callers_tls)], index, seconds, go, send))
        proc.start()
        pipes.append(receive)
        procs.append(proc)
    for receive in pipes:
        if receive.recv() != "warm":
            raise RuntimeError(f"a {protocol} caller failed to warm up")

    def timed() -> list[tuple[list[float], int, float]]:
        go.set()
        return [receive.recv() for receive in pipes]

    server_cpu = process_cpu_seconds(server_pid)
    outcomes, window = measured(timed, own_children=True)
    server_cpu_end = process_cpu_seconds(server_pid)
    for proc in procs:
        proc.join(30)
    return PhaseResult(
        protocol,
        seconds,
        latencies_ms=np.array([s for samples, _, _ in outcomes for s in samples]) * 1000,
        errors=sum(errors for _, errors, _ in outcomes),
        window=window,
        server_cpu_s=None if server_cpu is None or server_cpu_end is None else server_cpu_end - server_cpu,
        callers_cpu_s=sum(cpu for _, _, cpu in outcomes),
    )


def hold_slow_connections(ports: list[int], count: int, held: Event, stop: Event, report: Connection) -> None:
    """Keep ``count`` certificate-less connections open across ``ports``, each trickling a byte a second."""
    import socket

    def opened(port: int) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setblocking(False)
            return sock
        except OSError:
            return None

    slots = [ports[i % len(ports)] for i in range(count)]
    socks: list[socket.socket | None] = [opened(port) for port in slots]
    reopened = 0
    held.set()
    while not stop.wait(1.0):
        for i, sock in enumerate(socks):
            try:
                if sock is None:
                    raise OSError("not open")
                sock.send(b"\x16")  # one more byte of a handshake that never ends
                if sock.recv(1024, socket.MSG_PEEK) == b"":  # the server closed it
                    raise OSError("closed")
            except BlockingIOError:
                continue  # open, and the server has sent nothing: still held
            except OSError:
                if sock is not None:
                    sock.close()
                socks[i] = opened(slots[i])
                reopened += 1
    for sock in socks:
        if sock is not None:
            sock.close()
    report.send(reopened)


def run_slow_phase(
    grpc_port: int, rest_port: int, callers_tls: list[TlsFiles], seconds: float, pid: int
) -> tuple[PhaseResult, int]:
    """The gRPC phase again, with ``SLOW_CONNECTIONS`` slow certificate-less connections held open."""
    ctx = multiprocessing.get_context("spawn")
    held, stop = ctx.Event(), ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    holder = ctx.Process(
        target=hold_slow_connections, args=([rest_port, grpc_port], SLOW_CONNECTIONS, held, stop, send)
    )
    holder.start()
    try:
        if not held.wait(60):
            raise RuntimeError("the slow connections were not opened within 60 s")
        phase = run_phase("gRPC", grpc_port, callers_tls, seconds, pid)
    finally:
        stop.set()
    reopened = receive.recv() if receive.poll(30) else -1
    holder.join(30)
    return phase, reopened


# ---- checks and report --------------------------------------------------------------------------


def check_answers(repository: Path, grpc_port: int, rest_port: int, tls: TlsFiles) -> None:
    """Both endpoints must answer exactly what the served ONNX model computes in this process.

    That the ONNX model computes what the torch network does, ``export_onnx`` checked when it wrote it.
    """
    from vflclient._inference import InferenceClient
    from vflserver.inference.onnx_model import load_servable

    rows = _rows(seed=99)[:5]
    expected = load_servable(repository).predict({"features": rows})
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=tls) as client:
        got = client.infer(MODEL, {"features": rows})
    context = ssl.create_default_context(cafile=str(tls.ca))
    context.load_cert_chain(str(tls.cert), str(tls.key))
    connection = http.client.HTTPSConnection("127.0.0.1", rest_port, context=context, timeout=10)
    body = {"inputs": [{"name": "features", "shape": list(rows.shape), "datatype": "FP32", "data": rows.tolist()}]}
    connection.request("POST", f"/v2/models/{MODEL}/infer", json.dumps(body), {"Content-Type": "application/json"})
    rest: dict[str, Any] = {o["name"]: o["data"] for o in json.loads(connection.getresponse().read())["outputs"]}
    connection.close()
    for name, want in expected.items():
        if not np.array_equal(got[name], want) or not np.array_equal(np.array(rest[name]).reshape(want.shape), want):
            raise RuntimeError(f"output {name!r} differs from the ONNX model run in-process")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=DURATION_S, help=f"per protocol (default {DURATION_S:.0f})")
    seconds = parser.parse_args(argv).seconds
    print(
        f"== inference endpoint: KServe v2 over mTLS, MLP {FEATURES} -> {list(HIDDEN)} -> {CLASSES}, batch 1, "
        f"{CALLERS} caller processes, {seconds:.0f} s per protocol =="
    )
    print(versions_line("grpcio", "aiohttp", "onnxruntime"), flush=True)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="vfl-bench-inference-") as tmp:
        certs = Path(tmp)
        pki = issue_pki(certs, (), callers=("bench-a", "bench-b"))
        server_tls = pki.server_files()
        callers_tls = [pki.caller_files(name) for name in ("bench-a", "bench-b")]
        repository = export_digits(certs / "model")
        receive, send = ctx.Pipe(duplex=False)
        stop = ctx.Event()
        server = ctx.Process(target=serve, args=(repository, server_tls, send, stop), name="inference-server")
        server.start()
        try:
            if not receive.poll(120):
                print("bench failed: the server did not start within 120 s", file=sys.stderr)
                return 1
            grpc_port, rest_port = receive.recv()
            check_answers(repository, grpc_port, rest_port, callers_tls[0])
            print("answers over gRPC and REST equal the ONNX model run in-process", flush=True)
            assert server.pid is not None
            phases = [run_phase("gRPC", grpc_port, callers_tls, seconds, server.pid)]
            print(phases[0].line(), flush=True)
            phases.append(run_phase("REST", rest_port, callers_tls, seconds, server.pid))
            print(phases[1].line(), flush=True)
            slow, reopened = run_slow_phase(grpc_port, rest_port, callers_tls, seconds, server.pid)
            print(
                f"gRPC with {SLOW_CONNECTIONS} slow certificate-less connections open "
                f"({SLOW_CONNECTIONS // 2} per port; cut by the server and reopened {reopened} times):",
                flush=True,
            )
            print(slow.line(), flush=True)
        except RuntimeError as exc:
            print(f"bench failed: {exc}", file=sys.stderr)
            return 1
        finally:
            stop.set()
            server.join(30)
    grpc_phase = phases[0]
    p99 = float(np.percentile(grpc_phase.latencies_ms, 99))
    slow_p99 = float(np.percentile(slow.latencies_ms, 99)) if len(slow.latencies_ms) else float("inf")
    print(
        f"gRPC p99 with slow connections open / quiet: {slow_p99:.2f} / {p99:.2f} ms = {slow_p99 / p99:.2f}x "
        f"(aim <= {SLOW_P99_RATIO:g}x; {slow.errors} errors)"
    )
    met = p99 <= TARGET_P99_MS and grpc_phase.rps >= TARGET_RPS and grpc_phase.errors == 0
    print(
        f"target: gRPC p99 <= {TARGET_P99_MS:.0f} ms at >= {TARGET_RPS:.0f} req/s with 0 errors; "
        f"measured p99 {p99:.2f} ms at {grpc_phase.rps:.0f} req/s with {grpc_phase.errors} errors"
    )
    print(f"BENCH inference_grpc_p99 {p99:.2f} ms target <= {TARGET_P99_MS:.0f} {'MET' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
