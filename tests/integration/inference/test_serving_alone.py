"""The headline promise: after an APFed job the active party serves inference by itself.

``vfl-server --serve`` and two ``vfl-client`` daemons run as OS processes over mTLS. Once training
ends, both clients exit; the test checks they are gone, then calls the server's inference
endpoints with the stock ``tritonclient`` (gRPC and HTTP, over mTLS): health, metadata and
ModelInfer must answer, with the predictions of the exported ``model.onnx`` loaded in this process,
and the Triton model repository the active party wrote beside it must hold the same model under
the job's name. SIGTERM then stops the server cleanly (exit 0).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from vflclient import read_party_csv
from vflcore.ml.onnx_export import MODEL_FILE
from vflserver.inference.artifact import FEATURES, LABEL, PROBABILITIES
from vflserver.inference.onnx_model import OnnxServable, load_servable
from vflserver.training.export import MODEL_REPOSITORY
from vfltesting.forked import Launcher
from vfltesting.localrun import Daemon, stop_all, wait_for_port
from vfltesting.paths import REPO_ROOT as ROOT
from vfltesting.pki import Pki
from vfltesting.servables import triton_grpc_client
from vfltesting.service import announced_ports, service_env

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
JOB_ID = "serve-alone"
#: APFed-C's epochs: 5, not 15. The claim is that the active party serves alone, not how well;
#: ~0.45 CPU-s an epoch over the three daemons (a digits SplitNN epoch at batch 32, measured 2026-11-29).
EPOCHS = 5
#: The active party alone, from its top three image rows, on the first 200 rows: 0.69 after 5
#: epochs (0.735 after 8), measured 2026-11-29; chance is 0.1.
ACCURACY_BAR = 0.6


def _config(tmp: Path, pki: Pki, data: Path) -> Path:
    text = (ROOT / "examples/configs/server.toml").read_text()
    text = text.replace('job_id = "digits-splitnn"', f'job_id = "{JOB_ID}"')
    text = text.replace('algorithm = "splitnn"', 'algorithm = "apfed_c"').replace("epochs = 20", f"epochs = {EPOCHS}")
    text += '\n[serving]\ngrpc_listen = "127.0.0.1:0"\nrest_listen = "127.0.0.1:0"\nclient_auth = "required"\n'
    path = tmp / "server.toml"
    path.write_text(text)
    return path


def test_endpoint_answers_with_every_passive_party_gone(
    pki: Pki, digits_data: Path, tmp_path: Path, forked_daemons: Launcher
) -> None:
    """Party 2 is the console script exec'd (``vfl-client --once``: its own exit 0 at the job's end); the
    server and party 3 are forked (``vfltesting.forked``: ~1 CPU-s a start, not ~6), running the same
    ``main``; after SIGTERM either kind ends in ``os._exit`` (``vflcore.runtime.daemon.leave``)."""
    runs, port_file, serving_ports = tmp_path / "runs", tmp_path / "port", tmp_path / "serving-ports"
    server_files = pki.server_files()
    common = ["--run-dir", str(runs), "--ca", str(pki.ca), "--log-format", "json"]
    procs: dict[str, Daemon] = {}
    log = (tmp_path / "party-2.log").open("wb")
    try:
        procs["server"] = server = forked_daemons.start(
            [str(BIN / "vfl-server"), "--once", "--config", str(_config(tmp_path, pki, digits_data)), "--serve"]
            + ["--listen", "127.0.0.1:0", "--port-file", str(port_file), "--serving-port-file", str(serving_ports)]
            + ["--data", str(digits_data / "party1.csv"), "--cert", str(server_files.cert)]
            + ["--key", str(server_files.key), *common],
            stderr=tmp_path / "server.log",
            stdout=tmp_path / "server.out",
            append=False,
            env=service_env(),
            cwd=tmp_path,
        )
        port = wait_for_port(port_file, procs["server"], timeout_s=120)
        for party in (2, 3):
            files = pki.party_files(party)
            command = [str(BIN / "vfl-client"), "--once", "--party", str(party), "--server", f"127.0.0.1:{port}"]
            command += ["--data", str(digits_data / f"party{party}.csv"), "--cert", str(files.cert)]
            command += ["--key", str(files.key), *common]
            if party == 2:
                procs["party-2"] = subprocess.Popen(command, stderr=log)
            else:
                procs[f"party-{party}"] = forked_daemons.start(
                    command, stderr=tmp_path / f"party-{party}.log", append=False, env=service_env(), cwd=tmp_path
                )
        grpc_port, rest_port = announced_ports(serving_ports, 120, server=procs["server"])
        for party in (2, 3):  # training is over: every passive party has left
            assert procs[f"party-{party}"].wait(timeout=60) == 0
        assert procs["server"].poll() is None

        party_dir = runs / JOB_ID / "party-1"
        local = OnnxServable(party_dir / MODEL_FILE)
        table = read_party_csv(digits_data / "party1.csv", label_column="label")
        features, labels = table.features[:200].astype(np.float32), np.asarray(table.labels)[:200]
        expected = local.predict({FEATURES: features})
        assert (expected[LABEL] == labels).mean() >= ACCURACY_BAR
        in_repository = load_servable(runs / MODEL_REPOSITORY)  # what a stock Triton would be pointed at
        assert in_repository.name == JOB_ID
        assert np.array_equal(in_repository.predict({FEATURES: features})[LABEL], expected[LABEL])

        caller = pki.caller_files("test-caller")  # party certificates are refused by default
        grpc_client = triton_grpc_client(grpc_port, caller)
        assert grpc_client.is_server_live() and grpc_client.is_model_ready(JOB_ID)
        meta = grpc_client.get_model_metadata(JOB_ID, as_json=True)
        assert meta["inputs"][0]["name"] == FEATURES and meta["inputs"][0]["shape"] == ["-1", str(features.shape[1])]
        request = triton_grpc.InferInput(FEATURES, list(features.shape), "FP32")
        request.set_data_from_numpy(features)
        result = grpc_client.infer(JOB_ID, [request])
        assert np.array_equal(result.as_numpy(LABEL), expected[LABEL])
        assert np.allclose(result.as_numpy(PROBABILITIES), expected[PROBABILITIES], atol=1e-6)

        http_client = triton_http.InferenceServerClient(
            f"127.0.0.1:{rest_port}",
            ssl=True,
            ssl_options={"ca_certs": str(pki.ca), "certfile": str(caller.cert), "keyfile": str(caller.key)},
        )
        assert http_client.is_server_ready()
        one = triton_http.InferInput(FEATURES, [1, features.shape[1]], "FP32")
        one.set_data_from_numpy(features[:1], binary_data=False)
        answer = http_client.infer(JOB_ID, [one], outputs=[triton_http.InferRequestedOutput(LABEL, binary_data=False)])
        assert answer.as_numpy(LABEL).tolist() == expected[LABEL][:1].tolist()
        http_client.close()
        grpc_client.close()

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, (tmp_path / "server.log").read_text()[-3000:]
        out = (tmp_path / "server.out").read_text()
        assert "standalone model" in out and "stopped serving" in out, out
    finally:
        stop_all(procs)
        log.close()
