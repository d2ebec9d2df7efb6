"""The service's Prometheus metrics: jobs, epochs, bytes on the wire, RPCs, parties online.

``ServiceMetrics`` keeps every metric in its own ``CollectorRegistry``, never prometheus_client's
global one, so that tests and several servers in one process do not collide. Jobs by state and
parties online are read from the job store and the connection table at scrape time; the rest are
counters the runner bumps. ``interceptor()`` counts and times every RPC the gRPC server answers.
The endpoint is off by default (``[metrics] enabled``); docs/reference/metrics.md lists every metric.

Labels carry names, states, party ids and status codes only: never sample ids or data.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric

from vflserver.inference.config import split_listen
from vflserver.inference.model_state import MODEL_STATES, ModelState

log = structlog.get_logger(__name__)

DIRECTIONS = ("sent", "received")
#: From a 1 ms health check to a 60 s wait on the slowest party; longer RPCs (streams held open
#: for a whole job) fall in +Inf.
RPC_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: How often the endpoint's accept loop looks for a stop: ``stop`` waits up to this long.
#: prometheus_client's ``start_http_server`` polls every 0.5 s, which the server's stop paid.
STOP_POLL_S = 0.02


class ServiceMetrics:
    """The service's metrics in their own CollectorRegistry (never the global one, so tests and several servers
    in one process do not collide)."""

    def __init__(
        self,
        *,
        jobs_by_state: Callable[[], Mapping[str, int]],
        parties_online: Callable[[], Mapping[int, bool]],
        served_models: Callable[[], Iterable[ModelState]] = list,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_ScrapeTimeGauges(jobs_by_state, parties_online))
        self.registry.register(_ServedModelGauges(served_models))
        self._epochs = Counter("vfl_epochs_total", "Training epochs completed.", ["algorithm"], registry=self.registry)
        self._jobs_ended = Counter(
            "vfl_jobs_ended_total", "Jobs that reached a final state.", ["state"], registry=self.registry
        )
        self._wire_bytes = Counter(
            "vfl_wire_bytes_total",
            "Tensor bytes exchanged with each passive party.",
            ["party", "direction"],
            registry=self.registry,
        )
        self._rpcs = Counter(
            "vfl_rpc_total",
            "RPCs answered, by final status code.",
            ["service", "method", "code"],
            registry=self.registry,
        )
        self._rpc_seconds = Histogram(
            "vfl_rpc_seconds",
            "Time from an RPC's arrival to its end (a response stream's end for streaming RPCs).",
            ["service", "method"],
            buckets=RPC_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self._http: WSGIServer | None = None  # while serve() runs

    def epoch_done(self, algorithm: str) -> None:
        """Count one finished training epoch of ``algorithm``."""
        self._epochs.labels(algorithm=algorithm).inc()

    def job_ended(self, state: str) -> None:
        """Count one job that reached its final ``state`` (succeeded, failed, cancelled, ...)."""
        self._jobs_ended.labels(state=state).inc()

    def wire_bytes(self, party: int, direction: str, nbytes: int) -> None:
        """Add ``nbytes`` sent to or received from passive party ``party``."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r} must be one of {list(DIRECTIONS)}")
        self._wire_bytes.labels(party=str(party), direction=direction).inc(nbytes)

    def interceptor(self) -> grpc.ServerInterceptor:
        """A server interceptor that counts (``vfl_rpc_total``) and times (``vfl_rpc_seconds``) every RPC."""
        return _RpcInterceptor(self._rpc_done)

    def serve(self, listen: str) -> int:
        """Serve ``/metrics`` over plain HTTP on ``host:port`` from a daemon thread; returns the bound port."""
        if self._http is not None:
            raise RuntimeError("the metrics endpoint is already being served; stop() it first")
        host, port = split_listen(listen)
        self._http = _serve_http(self.registry, host, port)
        bound = self._http.server_port
        log.info("metrics endpoint listening", address=f"http://{listen.rpartition(':')[0]}:{bound}/metrics")
        return bound

    def stop(self) -> None:
        """Shut the HTTP endpoint down and free its port; does nothing if it is not being served."""
        if self._http is None:
            return
        self._http.shutdown()
        self._http.server_close()
        self._http = None

    def render(self) -> str:
        """The text exposition a scrape would get, for tests and debugging."""
        return generate_latest(self.registry).decode()

    def _rpc_done(self, service: str, method: str, code: str, seconds: float) -> None:
        self._rpcs.labels(service=service, method=method, code=code).inc()
        self._rpc_seconds.labels(service=service, method=method).observe(seconds)


class _QuietServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight does not hold the process


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No access log on stderr: Prometheus scrapes every few seconds."""


def _serve_http(registry: CollectorRegistry, host: str, port: int) -> WSGIServer:
    """prometheus_client's ``start_http_server``, with an accept loop that notices a stop within ``STOP_POLL_S``."""

    class Server(_QuietServer):
        pass

    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    Server.address_family = family  # IPv6 too: WSGIServer binds AF_INET unless told
    http = make_server(str(sockaddr[0]), port, make_wsgi_app(registry), Server, handler_class=_QuietHandler)
    threading.Thread(target=http.serve_forever, args=(STOP_POLL_S,), name="metrics", daemon=True).start()
    return http


class _ScrapeTimeGauges:
    """``vfl_jobs`` and ``vfl_party_online``, read from their sources each time Prometheus scrapes."""

    def __init__(
        self, jobs_by_state: Callable[[], Mapping[str, int]], parties_online: Callable[[], Mapping[int, bool]]
    ) -> None:
        self._jobs_by_state = jobs_by_state
        self._parties_online = parties_online

    def describe(self) -> Iterable[Metric]:
        # Names only, so that registering does not call the sources (the job store may not be open yet).
        return [self._jobs(), self._online()]

    def collect(self) -> Iterator[Metric]:
        # A busy job store should cost one family, not the whole scrape (a 500 would hide the counters too).
        try:
            jobs = self._jobs()
            for state, count in sorted(self._jobs_by_state().items()):
                jobs.add_metric([state], count)
            yield jobs
        except Exception:
            log.warning("metrics source failed; vfl_jobs left out of this scrape", exc_info=True)
        try:
            online = self._online()
            for party, up in sorted(self._parties_online().items()):
                online.add_metric([str(party)], 1.0 if up else 0.0)
            yield online
        except Exception:
            log.warning("metrics source failed; vfl_party_online left out of this scrape", exc_info=True)

    @staticmethod
    def _jobs() -> GaugeMetricFamily:
        return GaugeMetricFamily("vfl_jobs", "Jobs in the job store, by state.", labels=["state"])

    @staticmethod
    def _online() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "vfl_party_online", "1 if the passive party is connected, 0 if it is not.", labels=["party"]
        )


class _ServedModelGauges:
    """``vfl_served_models`` and ``vfl_served_models_missing_party``, read from the served models at each scrape.

    Counts, not one series per model: the standalone models of every finished job stay served,
    and job ids stay out of the labels (docs/reference/metrics.md).
    """

    def __init__(self, served_models: Callable[[], Iterable[ModelState]]) -> None:
        self._served_models = served_models

    def describe(self) -> Iterable[Metric]:
        return [self._by_state(), self._missing()]

    def collect(self) -> Iterator[Metric]:
        try:
            states = list(self._served_models())
        except Exception:
            log.warning("metrics source failed; vfl_served_models left out of this scrape", exc_info=True)
            return
        by_state = self._by_state()
        for name in MODEL_STATES:
            by_state.add_metric([name], sum(state.state == name for state in states))
        yield by_state
        missing = self._missing()
        parties = sorted({party for state in states for party in state.parties})
        for party in parties:
            missing.add_metric([str(party)], sum(party in state.missing for state in states))
        yield missing

    @staticmethod
    def _by_state() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "vfl_served_models",
            "Models on the inference endpoint, by state: serving, degraded (stand-ins for a missing party), "
            "or waiting (for a missing party).",
            labels=["state"],
        )

    @staticmethod
    def _missing() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "vfl_served_models_missing_party",
            "Served federated models that lack this passive party now (waiting for it, or degraded).",
            labels=["party"],
        )


_Record = Callable[[str, str, str, float], None]


class _RpcInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type hints
    """Wraps each handler so that its count and latency are recorded when the call ends."""

    def __init__(self, record: _Record) -> None:
        self._record = record

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:  # unknown method: grpc answers UNIMPLEMENTED, and its name stays out of the labels
            return None
        service, method = split_method(handler_call_details.method)

        def done(code: str, started: float) -> None:
            self._record(service, method, code, time.perf_counter() - started)

        def unary_response(behaviour: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
            def wrapped(request: Any, context: Any) -> Any:
                started = time.perf_counter()
                try:
                    response = behaviour(request, context)
                except BaseException:
                    done(_status(context, "UNKNOWN"), started)
                    raise
                done(_status(context, "OK"), started)
                return response

            return wrapped

        def stream_response(behaviour: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Iterator[Any]]:
            def wrapped(request: Any, context: Any) -> Iterator[Any]:
                started = time.perf_counter()  # now, not at the first next(): grpc may wait before pulling
                return _timed_stream(lambda: behaviour(request, context), context, lambda code: done(code, started))

            return wrapped

        kinds = (handler.request_streaming, handler.response_streaming)
        serialization = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if kinds == (False, False):
            return grpc.unary_unary_rpc_method_handler(unary_response(handler.unary_unary), **serialization)
        if kinds == (False, True):
            return grpc.unary_stream_rpc_method_handler(stream_response(handler.unary_stream), **serialization)
        if kinds == (True, False):
            return grpc.stream_unary_rpc_method_handler(unary_response(handler.stream_unary), **serialization)
        return grpc.stream_stream_rpc_method_handler(stream_response(handler.stream_stream), **serialization)


def _timed_stream(start: Callable[[], Iterator[Any]], context: Any, done: Callable[[str], None]) -> Iterator[Any]:
    try:
        yield from start()
    except GeneratorExit:  # grpc dropped the stream unfinished: the client cancelled or went away
        done("CANCELLED")
        raise
    except BaseException:
        done(_status(context, "UNKNOWN"))
        raise
    done(_status(context, "OK"))


def _status(context: Any, default: str) -> str:
    """The code grpc will send: the one the handler set (``set_code``, ``abort``) if any, else ``default``.

    ``context.abort`` raises a bare Exception after storing its code, which ``context.code()`` then reports.
    """
    code = context.code()
    if code is None:
        return default
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


def split_method(full_method: str) -> tuple[str, str]:
    """``"/vfl.v1.Federation/Join"`` as ``("vfl.v1.Federation", "Join")``."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method
