"""The active party's service, assembled: job store, job runner, gRPC server, inference endpoint, metrics.

``vfl-server`` builds one ``Service`` and runs it until a signal; tests build one on port 0. The
pieces and who owns what:

- ``JobStore`` (SQLite in the run directory) holds every job, its epochs and its events.
- ``JobRunner`` runs the queued jobs one at a time and writes their progress to the store.
- ``JobBoard`` tells the Federation handlers which job is open and offers it to the daemons.
- The gRPC server carries ``Federation`` (parties) and ``Control`` (operators) on one port.
- The inference endpoint (if ``[serving] enabled``) serves each finished job's model by its id.
- ``ServiceMetrics`` (if ``[metrics] enabled``) exposes all of it to Prometheus.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import grpc
import structlog

from vflcore.runtime.config import ServerConfig
from vflserver.federation.board import JobBoard
from vflserver.federation.server import build_server
from vflserver.inference.config import ServingConfig
from vflserver.inference.endpoint import BoundPorts, InferenceEndpoint
from vflserver.inference.registry import ModelRegistry
from vflserver.jobs.control import ControlService, submit_job
from vflserver.jobs.metrics import ServiceMetrics
from vflserver.jobs.progress import JobListener
from vflserver.jobs.run_marker import LastRun, RunMarker
from vflserver.jobs.runner import JobRunner
from vflserver.jobs.store import JobRecord, JobStore

log = structlog.get_logger(__name__)


class Service:
    """Everything ``vfl-server`` runs, bound but not started: ``start()``, then ``stop()``."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        serving: ServingConfig | None = None,
        insecure: bool = False,
        listener: JobListener | None = None,
    ) -> None:
        self.config = config
        settings = config.settings
        self.insecure = insecure
        tls = None if insecure else config.tls
        self.store = JobStore(settings.store_path)
        self.marker = RunMarker(self.store.path)  # claimed under the store's lock: one server at a time
        last_run = self.marker.claim()
        # Jobs a previous run left unfinished are interrupted, then queued again: each resumes
        # from the newest checkpoint every party holds once its parties have reconnected.
        self.recovered = self.store.recover()
        resuming = self.store.requeue_interrupted()
        if last_run is not None:  # first: what happened, then what it did to each job
            _say_unclean_stop(last_run, resuming)
        for record in self.recovered:
            log.warning("job_interrupted", job=record.job_id, reason=record.error)
        for record in resuming:
            log.info("job_resumes", job=record.job_id, epochs_done=record.epochs_done, epochs=record.epochs)
        self.board = JobBoard()
        serving = serving or ServingConfig()
        self.registry = ModelRegistry() if serving.enabled else None
        self.metrics = (
            ServiceMetrics(
                jobs_by_state=self.store.counts_by_state,
                parties_online=self.board.online,
                served_models=lambda: self.runner.serving.model_states(),
            )
            if settings.metrics_enabled
            else None
        )
        self.endpoint = (
            InferenceEndpoint(self.registry, serving, tls, insecure=insecure) if self.registry is not None else None
        )
        self.runner = JobRunner(
            self.store, self.board, config, registry=self.registry, metrics=self.metrics, listener=listener
        )
        self.control = ControlService(
            self.store,
            self.runner,
            datasets=config.datasets,
            join_timeout_s=settings.join_timeout_s,
            insecure=insecure,
        )
        self.server: grpc.Server
        try:
            self.server, self.port = build_server(
                self.board,
                settings.listen,
                tls,
                insecure=insecure,
                control=self.control,
                interceptors=[self.metrics.interceptor()] if self.metrics is not None else [],
                workers=settings.max_rpcs,
                max_party_rpcs=settings.max_party_rpcs,
            )
        except BaseException:  # not a crash: the next start has nothing to report
            self.marker.release()
            self.store.close()
            raise
        self.serving_ports: BoundPorts | None = None
        self.metrics_port: int | None = None

    def metrics_url(self) -> str | None:
        """Where the metrics endpoint answers, once started (None when it is off)."""
        if self.metrics_port is None:
            return None
        return f"http://{self.config.settings.metrics_listen.rpartition(':')[0]}:{self.metrics_port}/metrics"

    def listeners(self) -> dict[str, str]:
        """What this service listens on, as bound (the console's server page)."""
        settings = self.config.settings
        found = {"federation and control (gRPC)": f"{settings.listen.rpartition(':')[0]}:{self.port}"}
        if self.serving_ports is not None:
            found["inference, gRPC"] = str(self.serving_ports.grpc)
            found["inference, REST"] = str(self.serving_ports.rest)
        if self.metrics_port is not None:
            found["metrics"] = f"{settings.metrics_listen.rpartition(':')[0]}:{self.metrics_port}"
        return found

    def start(self) -> None:
        """Serve the federation and the Control API, the endpoints, and start running jobs.

        OSError if the inference or metrics address cannot be bound; nothing is left running then.
        """
        self.server.start()
        try:
            if self.endpoint is not None:
                self.serving_ports = self.endpoint.start()
            if self.metrics is not None:
                self.metrics_port = self.metrics.serve(self.config.settings.metrics_listen)
        except BaseException:
            self.stop()
            raise
        self.runner.start()
        log.info("service_started", port=self.port, serving=self.serving_ports, metrics=self.metrics_port)

    def submit(self, document: Mapping[str, Any], submitter: str) -> JobRecord:
        """Queue a job from inside the server (``vfl-server`` with a ``[job]`` table)."""
        return submit_job(
            self.store,
            self.runner,
            document,
            submitter=submitter,
            datasets=self.config.datasets,
            join_timeout_s=self.config.settings.join_timeout_s,
        )

    def stop(self, grace_s: float = 1.0) -> None:
        """Interrupt the running job (it is recorded as interrupted), stop every listener, close the store.

        The long-lived calls end at once rather than at the end of gRPC's grace: the job's own
        streams with the job, every Watch once it has delivered the job's last event, and every
        NextJob long poll as soon as gRPC refuses new calls (its caller's next one is refused, so
        the daemon goes to its reconnect backoff instead of asking again). ``grace_s`` is then
        only for unary calls in flight; what still runs after it is cancelled.
        """
        self.runner.stop()
        self.control.shut()
        stopped = self.server.stop(grace=grace_s)  # refuses new calls from here on
        self.board.shut()
        stopped.wait()
        if self.endpoint is not None:
            self.endpoint.stop()
        if self.metrics is not None:
            self.metrics.stop()
        self.marker.release()  # a clean stop: the next start has no unclean_stop to report
        self.store.close()
        log.info("service_stopped")


def _say_unclean_stop(last_run: LastRun, resuming: list[JobRecord]) -> None:
    """Log ``unclean_stop``: the last server on this store died (a crash, kill -9, power) rather than stopped.

    Names the jobs queued again to resume (job ids only), and says where a crash's trace went,
    for the operator who reports it (docs/how-to/systemd.md#reporting-a-crash).
    """
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last_run.started_at)) if last_run.started_at else None
    log.warning(
        "unclean_stop",
        message="the last run ended without a clean stop (a crash, kill -9 or power loss); a crash's trace is "
        "on its stderr (the journal) and in its --log-file",
        last_pid=last_run.pid,
        last_started=started,
        resuming=[record.job_id for record in resuming],
    )
