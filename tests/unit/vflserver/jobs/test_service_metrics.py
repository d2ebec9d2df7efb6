"""Tests for vflserver.jobs.metrics: scrape-time gauges, counters, the RPC interceptor, the HTTP endpoint."""

from __future__ import annotations

import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from vflserver.inference.model_state import ModelState
from vflserver.jobs.metrics import ServiceMetrics, split_method
from vfltesting.paths import REPO_ROOT

PROBE = "test.Probe"
#: Every metric the service exposes, as docs/reference/metrics.md lists them.
EVERY_METRIC = (
    "vfl_jobs",
    "vfl_party_online",
    "vfl_served_models",
    "vfl_served_models_missing_party",
    "vfl_epochs_total",
    "vfl_jobs_ended_total",
    "vfl_wire_bytes_total",
    "vfl_rpc_total",
    "vfl_rpc_seconds",
)


def sample(metrics: ServiceMetrics, name: str, **labels: str) -> float | None:
    """The value of one series in a scrape, or None if the scrape does not have it."""
    for family in text_string_to_metric_families(metrics.render()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


def rpc_count(metrics: ServiceMetrics, method: str, code: str, service: str = PROBE) -> float | None:
    return sample(metrics, "vfl_rpc_total", service=service, method=method, code=code)


def rpc_observations(metrics: ServiceMetrics, method: str, service: str = PROBE) -> float | None:
    return sample(metrics, "vfl_rpc_seconds_count", service=service, method=method)


def _count(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    for i in range(len(request)):
        yield bytes([i])


def _sum(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
    return bytes([sum(len(r) for r in requests)])


def _echo(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    yield from requests


def _missing(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.NOT_FOUND, "no job with that id")
    raise AssertionError("abort returned")


def _missing_midstream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    yield b"first"
    context.abort(grpc.StatusCode.NOT_FOUND, "the job went away")


def _crash(request: bytes, context: grpc.ServicerContext) -> bytes:
    raise ValueError("a bug")


def _endless(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    while True:
        yield b"tick"


PROBE_HANDLERS = {
    "Count": grpc.unary_stream_rpc_method_handler(_count),
    "Sum": grpc.stream_unary_rpc_method_handler(_sum),
    "Echo": grpc.stream_stream_rpc_method_handler(_echo),
    "Missing": grpc.unary_unary_rpc_method_handler(_missing),
    "MissingMidstream": grpc.unary_stream_rpc_method_handler(_missing_midstream),
    "Crash": grpc.unary_unary_rpc_method_handler(_crash),
    "Endless": grpc.unary_stream_rpc_method_handler(_endless),
}


@pytest.fixture
def metrics() -> ServiceMetrics:
    return ServiceMetrics(jobs_by_state=lambda: {}, parties_online=lambda: {})


@pytest.fixture
def channel(metrics: ServiceMetrics) -> Iterator[grpc.Channel]:
    """A plaintext loopback server with the interceptor, health checking and the probe service."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[metrics.interceptor()])
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(PROBE, PROBE_HANDLERS),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    server.stop(None).wait()


def call(channel: grpc.Channel, kind: str, method: str) -> Any:
    return getattr(channel, kind)(f"/{PROBE}/{method}")


class TestScrapeTimeGauges:
    def test_jobs_and_parties_are_read_at_each_scrape(self) -> None:
        """vfl_jobs and vfl_party_online show whatever their sources hold when the scrape happens."""
        jobs = {"queued": 2}
        online = {2: True}
        metrics = ServiceMetrics(jobs_by_state=lambda: jobs, parties_online=lambda: online)
        assert sample(metrics, "vfl_jobs", state="queued") == 2
        assert sample(metrics, "vfl_party_online", party="2") == 1
        jobs.update(queued=0, running=1)
        online[2], online[3] = False, True
        assert sample(metrics, "vfl_jobs", state="queued") == 0
        assert sample(metrics, "vfl_jobs", state="running") == 1
        assert sample(metrics, "vfl_party_online", party="2") == 0
        assert sample(metrics, "vfl_party_online", party="3") == 1

    def test_sources_are_not_called_before_the_first_scrape(self) -> None:
        """Registering the collector only describes it, so the job store need not be open yet."""

        def not_yet() -> dict[str, int]:
            raise AssertionError("called at construction")

        ServiceMetrics(jobs_by_state=not_yet, parties_online=lambda: {})

    def test_a_failing_source_costs_its_family_not_the_scrape(self) -> None:
        """If the job store raises, the scrape still carries the other metrics, and a warning is logged."""

        def busy() -> dict[str, int]:
            raise RuntimeError("database is locked")

        metrics = ServiceMetrics(jobs_by_state=busy, parties_online=lambda: {4: True})
        metrics.epoch_done("splitnn")
        with structlog.testing.capture_logs() as logs:
            text = metrics.render()
        assert "vfl_jobs{" not in text
        assert sample(metrics, "vfl_party_online", party="4") == 1
        assert sample(metrics, "vfl_epochs_total", algorithm="splitnn") == 1
        assert [entry["log_level"] for entry in logs] == ["warning"]
        assert "vfl_jobs" in logs[0]["event"]


class TestServedModels:
    def test_models_are_counted_by_state_and_each_missing_party(self) -> None:
        """A standalone model, a federated one waiting for party 3 and a degraded one without party 2."""
        states = [
            ModelState("serving"),
            ModelState("waiting", {3: "its connection to the server closed"}, (2, 3)),
            ModelState("degraded", {2: "it reconnected and is loading its trained part"}, (2, 3)),
        ]
        metrics = ServiceMetrics(jobs_by_state=dict, parties_online=dict, served_models=lambda: states)
        assert sample(metrics, "vfl_served_models", state="serving") == 1
        assert sample(metrics, "vfl_served_models", state="waiting") == 1
        assert sample(metrics, "vfl_served_models", state="degraded") == 1
        assert sample(metrics, "vfl_served_models_missing_party", party="2") == 1
        assert sample(metrics, "vfl_served_models_missing_party", party="3") == 1
        states[1:] = [ModelState("serving", parties=(2, 3))]
        assert sample(metrics, "vfl_served_models", state="serving") == 2
        assert sample(metrics, "vfl_served_models", state="waiting") == 0
        assert sample(metrics, "vfl_served_models_missing_party", party="3") == 0

    def test_no_source_means_no_model(self) -> None:
        """A server without an inference endpoint reports 0 models in every state."""
        metrics = ServiceMetrics(jobs_by_state=dict, parties_online=dict)
        assert sample(metrics, "vfl_served_models", state="serving") == 0
        assert "vfl_served_models_missing_party{" not in metrics.render()


class TestCounters:
    def test_epochs_jobs_and_bytes_are_counted_by_label(self, metrics: ServiceMetrics) -> None:
        """Each call adds to the series named by its labels."""
        metrics.epoch_done("splitnn")
        metrics.epoch_done("splitnn")
        metrics.epoch_done("vim")
        metrics.job_ended("succeeded")
        metrics.wire_bytes(2, "sent", 1000)
        metrics.wire_bytes(2, "sent", 500)
        metrics.wire_bytes(3, "received", 7)
        assert sample(metrics, "vfl_epochs_total", algorithm="splitnn") == 2
        assert sample(metrics, "vfl_epochs_total", algorithm="vim") == 1
        assert sample(metrics, "vfl_jobs_ended_total", state="succeeded") == 1
        assert sample(metrics, "vfl_wire_bytes_total", party="2", direction="sent") == 1500
        assert sample(metrics, "vfl_wire_bytes_total", party="3", direction="received") == 7
        assert sample(metrics, "vfl_wire_bytes_total", party="3", direction="sent") is None

    def test_wire_direction_is_checked(self, metrics: ServiceMetrics) -> None:
        """A direction other than sent or received is a programming error, not a new series."""
        with pytest.raises(ValueError, match=r"'up' must be one of \['sent', 'received'\]"):
            metrics.wire_bytes(2, "up", 1)

    def test_two_instances_do_not_collide(self) -> None:
        """Each ServiceMetrics has its own registry: same names, separate values."""
        first = ServiceMetrics(jobs_by_state=lambda: {"running": 1}, parties_online=lambda: {})
        second = ServiceMetrics(jobs_by_state=lambda: {"running": 5}, parties_online=lambda: {})
        first.epoch_done("splitnn")
        assert sample(first, "vfl_epochs_total", algorithm="splitnn") == 1
        assert sample(second, "vfl_epochs_total", algorithm="splitnn") is None
        assert sample(second, "vfl_jobs", state="running") == 5


class TestDocumentation:
    def test_every_metric_is_in_the_metrics_reference(self) -> None:
        """The scrape holds exactly the documented families, of the documented types: no metric goes undocumented."""
        metrics = ServiceMetrics(jobs_by_state=lambda: {"queued": 1}, parties_online=lambda: {2: True})
        exposed = {family.name for family in text_string_to_metric_families(metrics.render())}
        # the parser names counters without _total; prometheus_client adds _created series of its own
        assert exposed == {name.removesuffix("_total") for name in EVERY_METRIC}
        table = (REPO_ROOT / "docs" / "reference" / "metrics.md").read_text()
        rows = dict(re.findall(r"^\| `(vfl_\w+)` \| (\w+) \|", table, flags=re.M))
        assert set(rows) == set(EVERY_METRIC), "the reference's table lists other metrics than the scrape holds"
        types = {family.name: family.type for family in text_string_to_metric_families(metrics.render())}
        for name, kind in rows.items():
            assert types[name.removesuffix("_total")] == kind, f"{name}: documented as {kind}"


class TestSplitMethod:
    def test_full_method_names_split_into_service_and_method(self) -> None:
        """gRPC's "/package.Service/Method" becomes the two labels."""
        assert split_method("/vfl.v1.Federation/Join") == ("vfl.v1.Federation", "Join")
        assert split_method("/grpc.health.v1.Health/Check") == ("grpc.health.v1.Health", "Check")


class TestInterceptor:
    def test_unary_health_check_is_counted_ok(self, metrics: ServiceMetrics, channel: grpc.Channel) -> None:
        """A health Check is counted once with code OK and one latency observation."""
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(3):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert rpc_count(metrics, "Check", "OK", service="grpc.health.v1.Health") == 3
        assert rpc_observations(metrics, "Check", service="grpc.health.v1.Health") == 3

    def test_a_code_set_without_raising_is_the_one_counted(
        self, metrics: ServiceMetrics, channel: grpc.Channel
    ) -> None:
        """Health Check of an unknown service sets NOT_FOUND and returns normally; the counter says NOT_FOUND."""
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert rpc_count(metrics, "Check", "NOT_FOUND", service="grpc.health.v1.Health") == 1
        assert rpc_count(metrics, "Check", "OK", service="grpc.health.v1.Health") is None

    def test_every_streaming_shape_is_counted_when_it_ends(
        self, metrics: ServiceMetrics, channel: grpc.Channel
    ) -> None:
        """Unary-stream, stream-unary and stream-stream calls pass their data through and are counted OK."""
        assert list(call(channel, "unary_stream", "Count")(b"abc")) == [b"\x00", b"\x01", b"\x02"]
        assert call(channel, "stream_unary", "Sum")(iter([b"ab", b"cde"])) == b"\x05"
        assert list(call(channel, "stream_stream", "Echo")(iter([b"x", b"y"]))) == [b"x", b"y"]
        for method in ("Count", "Sum", "Echo"):
            assert rpc_count(metrics, method, "OK") == 1, method
            assert rpc_observations(metrics, method) == 1, method

    def test_abort_is_counted_with_its_code(self, metrics: ServiceMetrics, channel: grpc.Channel) -> None:
        """context.abort raises inside the handler; the code it set (NOT_FOUND) is what is counted."""
        with pytest.raises(grpc.RpcError) as info:
            call(channel, "unary_unary", "Missing")(b"")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert info.value.details() == "no job with that id"
        assert rpc_count(metrics, "Missing", "NOT_FOUND") == 1
        assert rpc_observations(metrics, "Missing") == 1

    def test_abort_inside_a_response_stream(self, metrics: ServiceMetrics, channel: grpc.Channel) -> None:
        """An abort after some responses ends the stream with its code, and that code is counted."""
        responses = call(channel, "unary_stream", "MissingMidstream")(b"")
        assert next(responses) == b"first"
        with pytest.raises(grpc.RpcError) as info:
            next(responses)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert rpc_count(metrics, "MissingMidstream", "NOT_FOUND") == 1

    def test_an_exception_is_counted_unknown(self, metrics: ServiceMetrics, channel: grpc.Channel) -> None:
        """A handler that raises without setting a code ends with UNKNOWN, as grpc reports it."""
        with pytest.raises(grpc.RpcError) as info:
            call(channel, "unary_unary", "Crash")(b"")
        assert info.value.code() == grpc.StatusCode.UNKNOWN
        assert rpc_count(metrics, "Crash", "UNKNOWN") == 1

    def test_a_cancelled_stream_is_counted_cancelled(self, metrics: ServiceMetrics, channel: grpc.Channel) -> None:
        """A response stream the client cancels is recorded when grpc drops it, as CANCELLED."""
        responses = call(channel, "unary_stream", "Endless")(b"")
        assert next(responses) == b"tick"
        responses.cancel()
        deadline = time.monotonic() + 10  # the server notices the cancellation on its own thread
        while rpc_count(metrics, "Endless", "CANCELLED") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rpc_count(metrics, "Endless", "CANCELLED") == 1

    def test_unknown_methods_stay_out_of_the_labels(self, metrics: ServiceMetrics, channel: grpc.Channel) -> None:
        """A method no handler serves is answered UNIMPLEMENTED by grpc and adds no series."""
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary("/test.Probe/NoSuchMethod")(b"")
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "NoSuchMethod" not in metrics.render()


class TestHttpEndpoint:
    def test_serve_exposes_every_metric_and_stop_frees_the_port(self) -> None:
        """GET /metrics on the bound port lists the metric names; after stop() nothing listens there."""
        metrics = ServiceMetrics(jobs_by_state=lambda: {"queued": 1}, parties_online=lambda: {2: True})
        metrics.epoch_done("splitnn")
        metrics.job_ended("failed")
        metrics.wire_bytes(2, "sent", 10)
        port = metrics.serve("127.0.0.1:0")
        try:
            assert port > 0
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                body = response.read().decode()
        finally:
            metrics.stop()
        for name in EVERY_METRIC:
            assert f"# TYPE {name} " in body, name
        assert 'vfl_jobs{state="queued"} 1.0' in body
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the closed connection may sit in TIME_WAIT
            probe.bind(("127.0.0.1", port))

    def test_serve_twice_needs_a_stop_between(self, metrics: ServiceMetrics) -> None:
        """A second serve() while serving is refused; after stop() it serves again, and stop() is idempotent."""
        metrics.serve("127.0.0.1:0")
        try:
            with pytest.raises(RuntimeError, match="already being served"):
                metrics.serve("127.0.0.1:0")
        finally:
            metrics.stop()
        metrics.stop()
        metrics.serve("127.0.0.1:0")
        metrics.stop()

    def test_a_bad_listen_address_is_refused(self, metrics: ServiceMetrics) -> None:
        """The address must be host:port."""
        with pytest.raises(ValueError, match="must look like host:port"):
            metrics.serve("9464")
