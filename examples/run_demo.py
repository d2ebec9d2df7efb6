"""The service on one machine: vfl-server and two vfl-client daemons, started once, as separate processes.

``make demo`` runs this after it has made the venv, the certificates and the example data. Each
daemon is a real OS process talking gRPC over mutual TLS on 127.0.0.1, configured the way
``docs/how-to/daemon-configs.md`` describes (datasets by name, a job store, the inference endpoint on).

1. The three daemons start once. An operator (certificate ``demo-operator``) submits two job
   files through the Python SDK's ``JobClient`` and watches each live:
   ``examples/jobs/splitnn.toml`` (SplitNN), then ``examples/jobs/apfed_c.toml`` (APFed-C).
2. Both passive daemons are stopped. The server's inference endpoint (KServe v2 over mTLS, the
   SDK's ``InferenceClient``) scores the held-out rows with the two models that need no passive
   party: the APFed-C model, served under its job id, and the student the SplitNN job distilled
   into the active party's own features (its ``[distill]`` table), served as ``<job>-student``.
3. The server is stopped with SIGTERM.

Daemon logs go to files under the run directory. Exits 0 only if both jobs finished, SplitNN
reached the accuracy bar, the endpoint answered with the server's own predictions, and every
daemon exited 0.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import numpy as np

from vflclient import InferenceClient, Job, JobClient, TlsFiles, VflError, read_party_csv
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ACCURACY_BAR = 0.93
#: The job files, and the id each is submitted under (a job file may leave its id to the server).
JOB_FILES = {"digits-splitnn": HERE / "jobs" / "splitnn.toml", "digits-apfed-c": HERE / "jobs" / "apfed_c.toml"}
OPERATOR = "demo-operator"
CALLER = "demo-app"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--certs", type=Path, default=Path("certs"))
    parser.add_argument("--data", type=Path, default=Path("examples/data"))
    parser.add_argument("--run-dir", type=Path, default=Path("runs/demo"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the demo gives up")
    args = parser.parse_args(argv)

    run_dir = args.run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in (run_dir / "runs").glob("jobs.sqlite*"):  # a demo starts with an empty job store
        old.unlink()
    certs, data = args.certs.resolve(), args.data.resolve()
    for role, name in (("operator", OPERATOR), ("caller", CALLER)):
        if not (certs / f"{name}.pem").exists():
            subprocess.run([str(BIN / "vfl-certs"), role, name, "--out", str(certs)], check=True, capture_output=True)

    print("== VFL demo: the service on 127.0.0.1, mutual TLS everywhere ==")
    print(f"   party 1 (vfl-server daemon): labels + image rows 0-2   {data / 'party1.csv'}")
    print(f"   party 2 (vfl-client daemon): image rows 3-5            {data / 'party2.csv'}")
    print(f"   party 3 (vfl-client daemon): image rows 6-7            {data / 'party3.csv'}")
    print(f"   logs and job store: {run_dir}", flush=True)
    service = ServiceRun(run_dir, Pki(certs), data)
    # Past the deadline every daemon is stopped, which ends any call the demo is waiting in.
    watchdog = threading.Timer(args.timeout, service.close)
    watchdog.daemon = True
    watchdog.start()
    try:
        service.start_server()
        service.start_clients()
        service.wait_connected(timeout_s=args.timeout)
        print(f"   daemons started once: server on port {service.port}, parties 2 and 3 connected", flush=True)
        operator = TlsFiles(ca=certs / "ca.pem", cert=certs / f"{OPERATOR}.pem", key=certs / f"{OPERATOR}.key")
        with JobClient(service.address, tls=operator) as jobs:
            splitnn, apfed = (_submit_and_watch(jobs, job_id, path) for job_id, path in JOB_FILES.items())
        accuracy = splitnn.final_metrics.get("accuracy", 0.0)
        verdict = "meets" if accuracy >= ACCURACY_BAR else "MISSES"
        print(f"== SplitNN federated test accuracy {accuracy:.4f} {verdict} the {ACCURACY_BAR} bar ==", flush=True)
        if splitnn.state != "finished" or apfed.state != "finished" or accuracy < ACCURACY_BAR:
            raise RuntimeError(f"jobs ended {splitnn.state} and {apfed.state}")
        clients = service.stop([f"party-{p}" for p in service.parties])
        if any(clients.values()):
            raise RuntimeError(f"the passive daemons exited with {clients}")
        print("   both passive daemons stopped (exit 0). Asking the active party's endpoint alone:", flush=True)
        grpc_port, _ = service.serving_ports()
        same = _query(certs, data, run_dir, grpc_port, apfed.id, "APFed-C")
        same &= _query(certs, data, run_dir, grpc_port, f"{splitnn.id}-student", "the SplitNN job's student")
        server = service.stop(["server"])["server"]
    except (RuntimeError, OSError, subprocess.SubprocessError, VflError, KeyboardInterrupt) as exc:
        print(f"demo failed: {exc or type(exc).__name__}", file=sys.stderr)
        print(service.tail(15), file=sys.stderr)
        return 1
    finally:
        watchdog.cancel()
        service.close()
    if server != 0 or not same:
        print(f"demo failed: vfl-server exited with {server}; same predictions: {same}", file=sys.stderr)
        return 1
    print("== done: the server stopped on SIGTERM; every daemon exited 0 ==")
    return 0


def _submit_and_watch(jobs: JobClient, job_id: str, path: Path) -> Job:
    """Submit a job file under ``job_id``, print its events as they happen, and return the ended job."""
    document = tomllib.loads(path.read_text())
    document["job"]["job_id"] = job_id
    job = jobs.submit(document)
    print(f"\n== job {job.id}: {job.algorithm}, {job.epochs} epochs, submitted by {job.submitter} ({path.name}) ==")
    for event in jobs.watch(job.id):
        print(f"   {event}", flush=True)
    return jobs.get(job.id)


def _query(certs: Path, data: Path, run_dir: Path, grpc_port: int, served: str, what: str) -> bool:
    """Score the held-out rows with model ``served`` through the endpoint; compare with the server's own evaluation."""
    runs = run_dir / "runs"
    student = served.endswith("-student")
    folder = runs / served.removesuffix("-student") / "party-1" / ("student" if student else "")
    held_out = (folder / "test_predictions.csv").read_text().splitlines()[1:]
    expected = {line.split(",")[0]: int(line.split(",")[2]) for line in held_out}
    table = read_party_csv(data / "party1.csv", label_column="label")
    row_of = {str(i): n for n, i in enumerate(table.ids)}
    ids = [i for i in expected if i in row_of]
    features = table.features[[row_of[i] for i in ids]].astype(np.float32)
    labels = np.asarray(table.labels)[[row_of[i] for i in ids]].astype(np.int64)
    tls = TlsFiles(ca=certs / "ca.pem", cert=certs / f"{CALLER}.pem", key=certs / f"{CALLER}.key")
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=tls) as client:
        meta = client.metadata(served)
        inputs = [(t.name, t.datatype, list(t.shape)) for t in meta.inputs]
        print(f"\n   {what}: model {meta.name!r} ({meta.platform}): inputs {inputs}")
        print(f"   the same model as ONNX: {folder / 'model.onnx'}")
        print(f"   as a Triton model repository: {runs / 'model_repository' / served} (config.pbtxt, 1/model.onnx)")
        out = client.infer(served, {"features": features})
        one = client.infer(served, {"features": features[:1]})
    predicted = out["label"]
    same = bool(np.array_equal(predicted, [expected[i] for i in ids]))
    accuracy = float((predicted == labels).mean())
    digit, confidence = int(one["label"][0]), float(one["probabilities"][0].max())
    print(f"   row {ids[0]}: predicted digit {digit} (true {labels[0]}), probability {confidence:.3f}")
    print(
        f"   {len(ids)} held-out rows scored by the endpoint alone: accuracy {accuracy:.4f} "
        f"(from the active party's own 3 image rows); same predictions as the server's final inference: {same}",
        flush=True,
    )
    return same


if __name__ == "__main__":
    raise SystemExit(main())
