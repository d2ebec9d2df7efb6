"""Every party brings its own torch model; every trained part leaves as ONNX that computes what torch computes.

In-process (threads, port 0, mTLS): the active party's own factories, equivalent to the default
MLPs, train exactly what the in-process reference trains; and every party's ``model.onnx``,
run by onnxruntime, gives its torch model's outputs within 1e-5.

As a user runs it (``vfl-server`` and two ``vfl-client`` daemons as processes): an APFed-C model
with a Conv1d and LayerNorm (which the old Linear-only artifact could not hold) is trained, served
from ONNX, and the stock tritonclient gets the server's own final predictions; bad factories are
refused at submission; a passive party builds the model the job names from its own ``[models]``.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc import InferInput, model_config_pb2

from vflclient import JobClient, read_party_csv
from vflcore.errors import VflError
from vflcore.ml.onnx_export import MODEL_FILE, onnx_session
from vflserver.inference.servable import LABEL, PROBABILITIES
from vfltesting.equivalence import Comparison, assert_same_steps, compare
from vfltesting.forked import Launcher
from vfltesting.jobs import REFERENCE_JOB
from vfltesting.pki import Pki
from vfltesting.servables import triton_grpc_client
from vfltesting.service import ServiceRun, announced_ports, job_document, service_env, toml_text

pytestmark = [pytest.mark.integration]

#: Each algorithm's own factories, equal to its default MLPs (``vfltesting.models``).
EQUIVALENT = {
    "splitnn": {"own_bottom_factory": "vfltesting.models:mlp_bottom", "top_factory": "vfltesting.models:mlp_top"},
    "apfed_c": {"encoder_factory": "vfltesting.models:mlp_bottom", "head_factory": "vfltesting.models:mlp_top"},
}
ONNX_TOLERANCE = 1e-5


@pytest.fixture(scope="module", params=sorted(EQUIVALENT))
def run(
    request: pytest.FixtureRequest,
    pki: Pki,
    digits_data: Path,
    tmp_path_factory: pytest.TempPathFactory,
    one_torch_thread: None,
) -> Comparison:
    job = replace(REFERENCE_JOB, job_id=f"own-{request.param}", algorithm=request.param)
    return compare(job, digits_data, pki, tmp_path_factory.mktemp(job.job_id), factories=EQUIVALENT[request.param])


def test_own_factories_equal_to_the_defaults_match_the_reference(run: Comparison) -> None:
    """Factories that build the default MLPs draw the same weights: every step within 1e-5 of the reference."""
    assert_same_steps(run)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(np.allclose(got, want, rtol=ONNX_TOLERANCE, atol=ONNX_TOLERANCE))


def test_every_partys_onnx_export_matches_torch(run: Comparison) -> None:
    """Each party's model.onnx, run by onnxruntime on held-out rows, gives its torch model's outputs."""
    rows = run.test_rows
    uploads: dict[int, np.ndarray] = {}
    for party, passive in sorted(run.running.passive.items()):
        assert passive.algorithm is not None and passive.table is not None
        session = onnx_session(passive.settings.run_dir / run.federated.job_id / f"party-{party}" / MODEL_FILE)
        features = passive.table.features[rows].astype(np.float32)
        (exported,) = session.run(None, {"features": features})
        if run.algorithm.needs_parties_to_predict:
            uploads[party] = passive.algorithm.embed(rows)
            want = uploads[party]
        else:  # APFed-C: the party's encoder ENC_p, which it trained but never uploads at inference
            model = passive.algorithm.model  # type: ignore[attr-defined]
            with torch.no_grad():
                want = model.eval()(torch.from_numpy(features)).numpy()
        assert exported.shape == want.shape and _close(exported, want), (party, np.abs(exported - want).max())

    active = run.running.active
    session = onnx_session(active.run_dir / MODEL_FILE)
    feeds = {"features": active.table.features[rows].astype(np.float32)}
    feeds.update({f"party_{party}": upload for party, upload in uploads.items()})
    assert [i.name for i in session.get_inputs()] == list(feeds)
    probabilities, labels = session.run([PROBABILITIES, LABEL], feeds)
    logits = run.algorithm.predict(rows, uploads)
    assert _close(probabilities, torch.softmax(logits, dim=1).numpy())
    assert np.array_equal(labels, logits.argmax(dim=1).numpy())


# ---- as a user runs it: the daemons as processes ----------------------------------------------


@pytest.fixture(scope="module")
def daemons(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    """A server with an inference endpoint and parties 2 and 3, each with a ``[models]`` table."""
    models = {"models": {"wide": "vfltesting.models:wide_bottom"}}
    with ServiceRun(tmp_path_factory.mktemp("own-models"), pki, digits_data, client_tables=models).started() as run:
        yield run


def _finished(jobs: JobClient, document: dict[str, dict[str, Any]], daemons: ServiceRun) -> None:
    job = jobs.submit(document)
    lines = [str(event) for event in jobs.watch(job.id)]
    assert jobs.get(job.id).state == "finished", "\n".join(lines) + daemons.tail()


CONV_JOB = "own-conv-apfed"


@pytest.fixture(scope="module")
def conv_job(daemons: ServiceRun, pki: Pki) -> Path:
    """APFed-C with the active party's own Conv1d encoder and LayerNorm head, trained once; its runs folder."""
    # Batches of 64, not job_document's 32: 15 steps, not 30 (nothing here depends on how well it learnt).
    document = job_document(CONV_JOB, "apfed_c", epochs=1, batch_size=64)
    document["model"].update(
        encoder_factory="vfltesting.models:conv_encoder", head_factory="vfltesting.models:layernorm_head"
    )
    with JobClient(daemons.address, tls=pki.operator_files("alice")) as jobs:
        _finished(jobs, document, daemons)
        assert jobs.get(CONV_JOB).served
    return daemons.root / "runs"


def _held_out(runs: Path, digits_data: Path) -> tuple[np.ndarray, list[int]]:
    """The active party's features of the held-out rows, and the server's own final predictions for them."""
    with (runs / CONV_JOB / "party-1" / "test_predictions.csv").open() as fh:
        final = {row["id"]: int(row["prediction"]) for row in csv.DictReader(fh)}
    table = read_party_csv(digits_data / "party1.csv", label_column="label")
    index = {str(i): n for n, i in enumerate(table.ids)}
    ids = sorted(final)
    return np.stack([table.features[index[i]] for i in ids]).astype(np.float32), [final[i] for i in ids]


def _triton_labels(port: int, pki: Pki, features: np.ndarray) -> list[int]:
    client = triton_grpc_client(port, pki.caller_files("test-caller"))
    request = InferInput("features", list(features.shape), "FP32")
    request.set_data_from_numpy(features)
    labels: list[int] = client.infer(CONV_JOB, [request]).as_numpy(LABEL).tolist()
    client.close()
    return labels


def test_a_conv_and_layernorm_apfed_model_is_served_from_onnx(
    conv_job: Path, daemons: ServiceRun, pki: Pki, digits_data: Path
) -> None:
    """The trained model's graph holds Conv and LayerNormalization; tritonclient gets the server's own predictions."""
    runs = conv_job
    graph = onnx.load(str(runs / CONV_JOB / "party-1" / MODEL_FILE)).graph
    assert {"Conv", "LayerNormalization"} <= {node.op_type for node in graph.node}

    # The Triton repository: its config parses into Triton's own message and agrees with the graph.
    folder = runs / "model_repository" / CONV_JOB
    assert (folder / "1" / MODEL_FILE).read_bytes() == (runs / CONV_JOB / "party-1" / MODEL_FILE).read_bytes()
    config = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.name == CONV_JOB and config.platform == "onnxruntime_onnx"
    assert [i.name for i in config.input] == [i.name for i in graph.input]
    assert [o.name for o in config.output] == [o.name for o in graph.output]

    features, final = _held_out(runs, digits_data)
    grpc_port, _ = daemons.serving_ports()
    assert _triton_labels(grpc_port, pki, features) == final


def _announced_grpc_port(ports: Path, serve: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    """The gRPC port ``vfl-serve --port-file`` announces ("grpc_port rest_port" and a newline)."""
    return announced_ports(ports, timeout_s, server=serve)[0]


def test_vfl_serve_serves_the_triton_repository(conv_job: Path, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
    """``vfl-serve --model <run_dir>/model_repository``: no training run, no party; the same predictions."""
    files = pki.server_files()
    ports = tmp_path / "ports"
    command = [str(Path(sys.executable).parent / "vfl-serve"), "--model", str(conv_job / "model_repository")]
    command += ["--grpc-listen", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0", "--port-file", str(ports)]
    command += ["--ca", str(files.ca), "--cert", str(files.cert), "--key", str(files.key)]
    serve = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=service_env())
    try:
        grpc_port = _announced_grpc_port(ports, serve)
        features, final = _held_out(conv_job, digits_data)
        assert _triton_labels(grpc_port, pki, features) == final
    finally:
        serve.terminate()
        # Past the daemon's own stop deadline (45 s: it writes every thread's stack and exits 1), so
        # that a stop that hangs fails here with its stacks rather than with a bare timeout.
        try:
            _, err = serve.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            _, err = serve.communicate()
    assert serve.returncode == 0, err.decode(errors="replace")[-6000:]


@pytest.mark.parametrize(
    ("algorithm", "model", "fragments"),
    [
        (
            "splitnn",
            {"top_factory": "tests.no_such_module:top"},
            ["[model] top_factory", "cannot import module 'tests.no_such_module'"],
        ),
        (
            "splitnn",
            {"top_factory": "vfltesting.models:one_too_wide"},
            ["[model] top_factory", "returns [4, 11]", "must return shape [4, 10]"],
        ),
        (
            "splitnn",
            {"top_factory": "vfltesting.models:not_a_model"},
            ["[model] top_factory", "expected a torch.nn.Module"],
        ),
        ("splitnn", {"encoder_factory": "vfltesting.models:mlp_bottom"}, ["[model] encoder_factory", "does not take"]),
        ("vimsgd", {"top_factory": "vfltesting.models:mlp_top"}, ["[model] top_factory", "vimsgd does not take"]),
    ],
)
def test_a_bad_factory_is_refused_at_submission(
    daemons: ServiceRun, pki: Pki, algorithm: str, model: dict[str, str], fragments: list[str]
) -> None:
    """The factory is imported and probed when the job is submitted: refused with its key, and nothing queued."""
    job_id = f"bad-{algorithm}-{sorted(model)[0]}-{abs(hash(tuple(model.values()))) % 1000}"
    document = job_document(job_id, algorithm)
    document["model"].update(model)
    with JobClient(daemons.address, tls=pki.operator_files("alice")) as jobs:
        with pytest.raises(VflError) as refused:
            jobs.submit(document)
        assert all(fragment in str(refused.value) for fragment in fragments), str(refused.value)
        assert job_id not in {job.id for job in jobs.list()}


def test_a_passive_party_builds_the_model_the_job_names(daemons: ServiceRun, pki: Pki) -> None:
    """``[job] model = "wide"``: each party builds its own ``[models] wide`` (128 hidden units) and keeps it."""
    with JobClient(daemons.address, tls=pki.operator_files("alice")) as jobs:
        _finished(jobs, job_document("own-wide", "splitnn", model="wide", batch_size=64), daemons)  # 15 steps
    for party in (2, 3):
        graph = onnx.load(str(daemons.root / "runs" / "own-wide" / f"party-{party}" / MODEL_FILE)).graph
        widths = {tuple(t.dims) for t in graph.initializer}
        assert any(128 in dims for dims in widths), widths
        assert not any(64 in dims for dims in widths), widths  # not the job's default bottom_hidden [64]


def test_a_model_name_a_party_lacks_fails_the_job_naming_it(daemons: ServiceRun, pki: Pki) -> None:
    """Party 3 has no model "huge": the job fails before PSI, naming the party and the name; the daemons stay up."""
    document = job_document("no-huge", "splitnn")
    document["job"]["models"] = {"3": "huge"}
    with JobClient(daemons.address, tls=pki.operator_files("alice")) as jobs:
        job = jobs.submit(document)
        lines = [str(event) for event in jobs.watch(job.id)]
        failed = jobs.get(job.id)
        assert failed.state == "failed", lines
        assert "party 3" in failed.error and "'huge'" in failed.error and "[models]" in failed.error, failed.error
    assert all(daemons.alive().values())


def test_a_bad_factory_in_the_servers_own_job_exits_2(
    tmp_path: Path, pki: Pki, digits_data: Path, forked_daemons: Launcher
) -> None:
    """A ``vfl-server`` config whose ``[job]`` names a broken factory: refused at start, exit 2, before listening.

    Forked from the suite's pre-imported launcher (``vfltesting.forked``: the console script's own
    ``main`` in its own process), not exec'd: the refusal is ``main``'s, and an exec'd ``vfl-server``
    exiting 2 at start is checked by ``test_devices``; this module's exec'd command is ``vfl-serve``.
    About 1 CPU-s rather than 5 (4.9 s measured exec'd).
    """
    files = pki.server_files()
    document = {
        "server": {"listen": "127.0.0.1:0", "run_dir": str(tmp_path / "runs")},
        "tls": {"ca": files.ca, "cert": files.cert, "key": files.key},
        "data": {"path": digits_data / "party1.csv"},
        "job": {"algorithm": "splitnn", "passive_parties": [2, 3]},
        "model": {"top_factory": "vfltesting.models:one_too_wide"},
    }
    config = tmp_path / "server.toml"
    config.write_text(toml_text(document))
    stderr = tmp_path / "server.stderr"
    argv = [str(Path(sys.executable).parent / "vfl-server"), "--config", str(config)]
    daemon = forked_daemons.start(argv, stderr=stderr, append=False, env=service_env(), cwd=tmp_path)
    code, err = daemon.wait(timeout=120), stderr.read_text()
    assert code == 2, err
    assert "the config's [job]: [model] top_factory" in err and "must return shape" in err
