"""The operator's program on the operator's host: job and inference calls, one JSON line each.

It is copied to the operator's folder and run there by the venv's Python, so it imports the
project from the installed wheel, never from the checkout: it may use the standard library, numpy
and ``vflclient``'s public API only (not ``vfltesting``). It reads one request per line on stdin
and writes one reply per line on stdout, so the test drives calls made from inside the
operator's network namespace:

    {"op": "submit", "document": {...}}            -> {"id": "..."}
    {"op": "get", "job": "..."}                    -> the job (``Job.to_json``)
    {"op": "list"}                                 -> {"jobs": [...]}
    {"op": "infer", "model": "...", "ids": [...]}  -> {"outputs": {"label": [...], ...}}
    {"op": "infer", "model": "...", "features": [[...]]}
    {"op": "ready", "model": "..."}                -> {"ready": true}

A call that raises replies ``{"failed": message, "type": exception class}``. Every reply has
``seconds``, the call's duration. ``sys.argv``: the server's ``HOST:PORT``, the inference
endpoint's ``HOST:PORT``, and the folder of ``ca.pem``, ``alice.*`` and ``scoring-app.*``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vflclient import InferenceClient, JobClient, TlsFiles


def main(server: str, endpoint: str, certs: Path) -> None:
    operator = TlsFiles(ca=certs / "ca.pem", cert=certs / "alice.pem", key=certs / "alice.key")
    caller = TlsFiles(ca=certs / "ca.pem", cert=certs / "scoring-app.pem", key=certs / "scoring-app.key")
    jobs: JobClient | None = None
    # One channel for the whole run, as a scoring application keeps one; 20 s per call at most.
    inference = InferenceClient(endpoint, tls=caller, timeout_s=20)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.monotonic()
        try:
            if jobs is None and request["op"] in ("submit", "get", "list"):
                jobs = JobClient(server, tls=operator, connect_timeout_s=30)
            reply = _answer(request, jobs, inference)
        except Exception as exc:
            reply = {"failed": str(exc), "type": type(exc).__name__}
        reply["seconds"] = round(time.monotonic() - started, 3)
        print(json.dumps(reply), flush=True)


def _answer(request: dict[str, Any], jobs: JobClient | None, inference: InferenceClient) -> dict[str, Any]:
    op = request["op"]
    if op == "submit":
        assert jobs is not None
        return {"id": jobs.submit(request["document"]).id}
    if op == "get":
        assert jobs is not None
        return jobs.get(request["job"]).to_json()
    if op == "list":
        assert jobs is not None
        return {"jobs": [job.to_json() for job in jobs.list()]}
    if op == "ready":
        return {"ready": inference.model_ready(request["model"])}
    if op == "infer":
        if "ids" in request:
            inputs = {"id": np.array([i.encode() for i in request["ids"]], dtype=object)}
        else:
            inputs = {"features": np.asarray(request["features"], dtype=np.float32)}
        outputs = inference.infer(request["model"], inputs)
        return {"outputs": {name: value.tolist() for name, value in outputs.items()}}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
