"""The main job on one machine: vfl-server and two vfl-client daemons as separate processes.

``make demo`` runs this after it has made the venv, the certificates and the example data. Each
daemon is a real OS process talking gRPC over mutual TLS on 127.0.0.1.

1. SplitNN: the server prints the per-epoch metrics and the final federated inference.
2. APFed-C with ``--serve``: the same three parties train a model the active party owns alone;
   both clients exit, and the demo then asks the server's inference endpoint (KServe v2 over
   mTLS, with the SDK's ``InferenceClient``) to score held-out rows: no passive party is running.

The daemons' logs go to files under the run directory. Exits 0 only if every process exited 0,
SplitNN reached the accuracy bar and the endpoint answered with the artifact's predictions.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from vflclient import InferenceClient, TlsFiles, read_party_csv
from vflcore.errors import VflError
from vfltesting.localrun import stop_all, wait_all, wait_for_port

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ACCURACY_BAR = 0.93
SERVED_JOB = "digits-apfed-c"
CALLER = "demo-app"


def _tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join("    " + line for line in text[-lines:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--certs", type=Path, default=Path("certs"))
    parser.add_argument("--data", type=Path, default=Path("examples/data"))
    parser.add_argument("--run-dir", type=Path, default=Path("runs/demo"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the demo gives up")
    args = parser.parse_args()

    run_dir = args.run_dir.resolve()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    port_file = run_dir / "port"
    port_file.unlink(missing_ok=True)
    certs, data = args.certs.resolve(), args.data.resolve()
    common = ["--run-dir", str(run_dir), "--ca", str(certs / "ca.pem"), "--log-format", "json"]

    print("== VFL demo: active party + 2 passive parties, SplitNN on digits, mutual TLS on 127.0.0.1 ==")
    print(f"   party 1 (vfl-server): labels + image rows 0-2   {data / 'party1.csv'}")
    print(f"   party 2 (vfl-client): image rows 3-5            {data / 'party2.csv'}")
    print(f"   party 3 (vfl-client): image rows 6-7            {data / 'party3.csv'}")
    print(f"   logs: {logs}", flush=True)

    procs: dict[str, subprocess.Popen[bytes]] = {}
    log_files = {name: logs / f"{name}.log" for name in ("server", "party-2", "party-3")}
    try:
        procs["server"] = subprocess.Popen(
            [
                str(BIN / "vfl-server"),
                "--config",
                str(HERE / "configs" / "server.toml"),
                "--listen",
                "127.0.0.1:0",
                "--port-file",
                str(port_file),
                "--data",
                str(data / "party1.csv"),
                "--cert",
                str(certs / "server.pem"),
                "--key",
                str(certs / "server.key"),
                *common,
            ],
            stderr=log_files["server"].open("wb"),
        )
        port = wait_for_port(port_file, procs["server"], timeout_s=120)
        for party in (2, 3):
            procs[f"party-{party}"] = subprocess.Popen(
                [
                    str(BIN / "vfl-client"),
                    "--party",
                    str(party),
                    "--config",
                    str(HERE / "configs" / f"party{party}.toml"),
                    "--server",
                    f"127.0.0.1:{port}",
                    "--data",
                    str(data / f"party{party}.csv"),
                    "--cert",
                    str(certs / f"party-{party}.pem"),
                    "--key",
                    str(certs / f"party-{party}.key"),
                    *common,
                ],
                stderr=log_files[f"party-{party}"].open("wb"),
            )
        codes = wait_all(procs, args.timeout)
    except (RuntimeError, subprocess.TimeoutExpired, KeyboardInterrupt) as exc:
        print(f"demo failed: {exc or type(exc).__name__}", file=sys.stderr)
        for name, path in log_files.items():
            print(f"--- last lines of {name} ({path}):\n{_tail(path)}", file=sys.stderr)
        return 1
    finally:
        stop_all(procs)  # also if starting one of them failed

    if any(codes.values()):
        print(f"demo failed: exit codes {codes}", file=sys.stderr)
        for name, path in log_files.items():
            print(f"--- last lines of {name} ({path}):\n{_tail(path)}", file=sys.stderr)
        return 1
    summary = json.loads((run_dir / "digits-splitnn" / "party-1" / "summary.json").read_text())
    accuracy = summary["final_metrics"]["accuracy"]
    verdict = "meets" if accuracy >= ACCURACY_BAR else "MISSES"
    print(
        f"== part 1 done: all three processes exited 0; "
        f"federated test accuracy {accuracy:.4f} {verdict} the {ACCURACY_BAR} bar ==",
        flush=True,
    )
    if accuracy < ACCURACY_BAR:
        return 1
    return serve_alone(args, run_dir, certs, data)


def serve_alone(args: argparse.Namespace, run_dir: Path, certs: Path, data: Path) -> int:
    """Part 2: APFed-C, then the active party's endpoint answers with every passive party gone."""
    print()
    print("== part 2: APFed-C, then the active party serves predictions alone (KServe v2 over mTLS) ==", flush=True)
    logs = run_dir / "logs"
    ports_file = run_dir / "serving-ports"
    ports_file.unlink(missing_ok=True)
    port_file = run_dir / "port"
    port_file.unlink(missing_ok=True)
    if not (certs / f"{CALLER}.pem").exists():
        subprocess.run([str(BIN / "vfl-certs"), "caller", CALLER, "--out", str(certs)], check=True, capture_output=True)
    common = ["--run-dir", str(run_dir), "--ca", str(certs / "ca.pem"), "--log-format", "json"]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    log_files = {name: logs / f"apfed-{name}.log" for name in ("server", "party-2", "party-3")}
    try:
        procs["server"] = subprocess.Popen(
            [str(BIN / "vfl-server"), "--config", str(HERE / "configs" / "server-apfed.toml"), "--serve"]
            + ["--listen", "127.0.0.1:0", "--port-file", str(port_file), "--serving-port-file", str(ports_file)]
            + ["--data", str(data / "party1.csv"), "--cert", str(certs / "server.pem")]
            + ["--key", str(certs / "server.key"), *common],
            stderr=log_files["server"].open("wb"),
        )
        port = wait_for_port(port_file, procs["server"], timeout_s=120)
        for party in (2, 3):
            procs[f"party-{party}"] = subprocess.Popen(
                [str(BIN / "vfl-client"), "--party", str(party), "--server", f"127.0.0.1:{port}"]
                + ["--config", str(HERE / "configs" / f"party{party}.toml"), "--data", str(data / f"party{party}.csv")]
                + ["--cert", str(certs / f"party-{party}.pem"), "--key", str(certs / f"party-{party}.key"), *common],
                stderr=log_files[f"party-{party}"].open("wb"),
            )
        clients = {name: proc for name, proc in procs.items() if name != "server"}
        codes = wait_all(clients, args.timeout)
        if any(codes.values()):
            raise RuntimeError(f"passive parties exited with {codes}")
        grpc_port = int(_wait_for_text(ports_file, procs["server"]).split()[0])
        print("   training done; both passive parties have exited. Asking the active party's endpoint:", flush=True)
        ok = _query(certs, data, run_dir, grpc_port)
        procs["server"].send_signal(signal.SIGTERM)
        server_code = procs["server"].wait(timeout=30)
    except (RuntimeError, subprocess.TimeoutExpired, KeyboardInterrupt, VflError) as exc:
        print(f"demo failed: {exc or type(exc).__name__}", file=sys.stderr)
        for name, path in log_files.items():
            print(f"--- last lines of {name} ({path}):\n{_tail(path)}", file=sys.stderr)
        return 1
    finally:
        stop_all(procs)
    if server_code != 0 or not ok:
        print(f"demo failed: vfl-server exited with {server_code}", file=sys.stderr)
        return 1
    print("== done: the server stopped serving on SIGTERM; every process exited 0 ==")
    return 0


def _wait_for_text(path: Path, server: subprocess.Popen[bytes], timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        if server.poll() is not None:
            raise RuntimeError(f"vfl-server exited with {server.returncode} before serving")
        time.sleep(0.2)
    raise RuntimeError(f"the inference endpoint did not start within {timeout_s:.0f} s")


def _query(certs: Path, data: Path, run_dir: Path, grpc_port: int) -> bool:
    """Score the held-out rows through the endpoint; compare with the server's own final inference."""
    held_out = (run_dir / SERVED_JOB / "party-1" / "test_predictions.csv").read_text().splitlines()[1:]
    expected = {line.split(",")[0]: int(line.split(",")[2]) for line in held_out}
    table = read_party_csv(data / "party1.csv", label_column="label")
    row_of = {str(i): n for n, i in enumerate(table.ids)}
    ids = [i for i in expected if i in row_of]
    features = table.features[[row_of[i] for i in ids]].astype(np.float32)
    labels = np.asarray(table.labels)[[row_of[i] for i in ids]].astype(np.int64)
    tls = TlsFiles(ca=certs / "ca.pem", cert=certs / f"{CALLER}.pem", key=certs / f"{CALLER}.key")
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=tls) as client:
        meta = client.metadata(SERVED_JOB)
        print(f"   model {meta.name!r}: inputs {[(t.name, t.datatype, list(t.shape)) for t in meta.inputs]}")
        out = client.infer(SERVED_JOB, {"features": features})
        one = client.infer(SERVED_JOB, {"features": features[:1]})
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
