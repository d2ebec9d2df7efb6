"""A federated model comes back when its passive party does: kill -9 a daemon, start it again, it serves again.

``vfl-server`` and two ``vfl-client`` daemons run as OS processes over mTLS (``vfltesting.service``).
The server serves two finished jobs: an APFed-C model, which the active party answers alone, and
a SplitNN model, which needs parties 2 and 3 for every request. Party 3's daemon is killed with
SIGKILL and started again. Meanwhile the SplitNN model is not ready and says why (``vfl-jobs
show``, the metrics), the server stays ready because the APFed model still serves
(``docs/reference/inference.md``, ServerReady), and once party 3 has reconnected the SplitNN model answers
again, with the predictions it gave before the kill. The server's own crash (kill -9) does not
end a SplitNN model either: the next start rebuilds it from disk, both daemons reconnect and
load their parts, and it answers with the same predictions.

Both tests run on one set of daemons that trained both models once (``served``): the server's
crash needs no fresh service, only a served SplitNN model, and the first test leaves its daemons
running. A service and a SplitNN job fewer (three daemon starts) took this file from 22.0 to 18.3
CPU-s (user+sys, pytest -n 0, measured 2026-11-29).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vflclient import InferenceClient, JobClient, ServerUnavailable
from vflserver.inference.federated import IDS
from vfltesting.pki import Pki
from vfltesting.service import BIN, ServiceRun, finish_job, job_document, log_events, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FEDERATED, STANDALONE = "fed-splitnn", "alone-apfed"


def _metrics_port(run: ServiceRun) -> int:
    """The metrics port the server announced in its ``service_started`` log line."""
    for line in run.logs["server"].read_text().splitlines():
        if '"service_started"' in line:
            return int(json.loads(line)["metrics"])
    raise AssertionError(f"no service_started line in the server log\n{run.tail()}")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        return str(reply.read().decode())


def _show(run: ServiceRun, pki: Pki, job_id: str) -> str:
    """``vfl-jobs show JOB`` as an operator runs it: the text it prints."""
    files = pki.operator_files("alice")
    command = [str(BIN / "vfl-jobs"), "--server", run.address, "--ca", str(files.ca), "--cert", str(files.cert)]
    command += ["--key", str(files.key), "show", job_id]
    shown = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.fixture(scope="module")
def served(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """A server and both passive daemons that trained and serve both models, the SplitNN one last."""
    run = ServiceRun(tmp_path_factory.mktemp("served"), pki, digits_data, metrics=True)
    with run.started():
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            for job_id, algorithm in ((STANDALONE, "apfed_c"), (FEDERATED, "splitnn")):
                finish_job(jobs, run, jobs.submit(job_document(job_id, algorithm)).id)
        yield run


@pytest.fixture
def service(served: ServiceRun) -> ServiceRun:
    """The daemons of ``served``, every one running: one a failed test left killed is started again."""
    for name, alive in served.alive().items():
        if not alive and name == "server":
            served.start_server(f"127.0.0.1:{served.port}")
        elif not alive:
            served.start_client(int(name.split("-")[1]))
    return served


def test_a_federated_model_serves_again_once_its_restarted_party_reconnects(service: ServiceRun, pki: Pki) -> None:
    """kill -9 party 3 after its SplitNN job: 503 naming it meanwhile, ServerReady true throughout, served again."""
    run = service
    with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
        grpc_port, _ = run.serving_ports()
        metrics_port = _metrics_port(run)
        aligned = (run.root / "runs" / FEDERATED / "party-1" / "aligned_ids.csv").read_text().splitlines()[1:5]
        ids = {IDS: np.array([i.encode() for i in aligned], dtype=object)}
        with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
            before = client.infer(FEDERATED, ids)
            assert client.ready() and client.model_ready(FEDERATED)
            assert jobs.get(FEDERATED).serving == "serving"

            server_ready: list[bool] = []

            def model_ready(want: bool) -> bool:
                server_ready.append(client.ready())  # sampled at every poll, throughout
                return client.model_ready(FEDERATED) == want

            run.kill("party-3")
            wait_until(lambda: model_ready(False), "the SplitNN model to be not ready without party 3", run)
            assert all(server_ready), "ServerReady went false although the APFed model serves"
            assert client.model_ready(STANDALONE)
            with pytest.raises(ServerUnavailable, match="party 3"):
                client.infer(FEDERATED, ids)
            waiting = jobs.get(FEDERATED)
            assert waiting.served and waiting.serving.startswith("waiting for party 3"), waiting.serving
            assert "waiting for party 3" in _show(run, pki, FEDERATED)
            scraped = _scrape(metrics_port)
            assert 'vfl_served_models{state="waiting"} 1.0' in scraped, scraped
            assert 'vfl_served_models{state="serving"} 1.0' in scraped, scraped  # the APFed model
            assert 'vfl_served_models_missing_party{party="3"} 1.0' in scraped, scraped

            run.start_client(3)
            wait_until(lambda: model_ready(True), "the SplitNN model to be ready again with party 3", run, 180)
            assert all(server_ready), "ServerReady went false although the APFed model serves"
            after = client.infer(FEDERATED, ids)
            np.testing.assert_array_equal(after["label"], before["label"])
            np.testing.assert_allclose(after["probabilities"], before["probabilities"], rtol=0, atol=1e-6)
            assert jobs.get(FEDERATED).serving == "serving"
            assert "waiting for party" not in _show(run, pki, FEDERATED)
            scraped = _scrape(metrics_port)
            assert 'vfl_served_models{state="serving"} 2.0' in scraped, scraped
            assert 'vfl_served_models_missing_party{party="3"} 0.0' in scraped, scraped
        assert all(run.alive().values()), run.tail()


def test_a_federated_model_is_served_again_after_the_server_crashes(service: ServiceRun, pki: Pki) -> None:
    """kill -9 the server while it serves a SplitNN model: the next start rebuilds it from disk, same predictions.

    The APFed model served beside it comes back too, without a ``model_served`` line: the server
    logs that line after a restart only for a federated model (``served_again``)."""
    run = service
    grpc_port, _ = run.serving_ports()
    aligned = (run.root / "runs" / FEDERATED / "party-1" / "aligned_ids.csv").read_text().splitlines()[1:7]
    ids = {IDS: np.array([i.encode() for i in aligned], dtype=object)}
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
        before = client.infer(FEDERATED, ids)

    run.kill("server")
    run.start_server(f"127.0.0.1:{run.port}")  # the daemons reconnect to the same address
    served_again = log_events(run.logs["server"], "model_served")
    assert [(e["job"], e["how"]) for e in served_again] == [
        (FEDERATED, "federated, again after a restart, until the next job starts")
    ], run.tail()
    grpc_port, _ = run.serving_ports()
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
        wait_until(
            lambda: client.model_ready(FEDERATED), "the SplitNN model to be served again", run, 180, every_s=0.05
        )
        after = client.infer(FEDERATED, ids)
    np.testing.assert_array_equal(after["label"], before["label"])
    np.testing.assert_allclose(after["probabilities"], before["probabilities"], rtol=0, atol=1e-6)
    with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
        record = jobs.get(FEDERATED)
        assert record.served and record.serving == "serving", record.serving
    readmitted = {e["peer"] for e in log_events(run.logs["server"], "party_readmitted")}
    assert readmitted == {2, 3}, run.tail()
    assert all(run.alive().values()), run.tail()
