"""openmined.psi on one pair of ID sets: server and client as two processes, message bytes over a pipe.

Run by path with the python of openmined.psi's own virtualenv (``bench.psi.comparison``), never
imported by the bench: that venv has openmined.psi (which pins protobuf==6.30.2) and nothing of
this project, so this file imports only the standard library and openmined.psi.

Usage: ``openmined.py SERVER_CSV CLIENT_CSV`` or ``openmined.py --synthetic N``. Prints one JSON
line: each side's phase seconds, bytes sent and peak RSS, ``wall_s`` (both start -> the client has
the intersection), the set sizes and openmined.psi's version.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import resource
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

FPR = 1e-9

Result = tuple[str, dict[str, float]]


def openmined_psi() -> Any:
    """openmined.psi, imported when a run starts: this module also imports where it is not installed.

    The project's own environment (tests, type checks, import checks) has no openmined.psi; only
    the venv that runs this file as a script does.
    """
    import private_set_intersection.python as psi  # type: ignore[import-not-found]

    return psi


def read_ids(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        next(fh)
        return [line.rstrip("\n") for line in fh if line.strip()]


def synthetic(n: int) -> tuple[list[str], list[str]]:
    """The bench's ID sets for n IDs a party, made here: smaller runs need no CSVs written."""
    server = [f"user-{i:07d}" for i in range(n)]
    client = [f"user-{i:07d}" for i in range(n // 2, n + n // 2)]
    random.Random(1).shuffle(server)
    random.Random(2).shuffle(client)
    return server, client


def server_main(ids: list[str], n_client: int, conn: Connection, start: Event, results: Queue[Result]) -> None:
    psi = openmined_psi()
    s = psi.server.CreateWithNewKey(True)
    start.wait()
    t0 = time.monotonic()
    setup = s.CreateSetupMessage(FPR, n_client, ids).SerializeToString()
    t1 = time.monotonic()
    request = psi.Request()
    request.ParseFromString(conn.recv_bytes())
    t2 = time.monotonic()
    conn.send_bytes(setup)
    response = s.ProcessRequest(request).SerializeToString()
    t3 = time.monotonic()
    conn.send_bytes(response)
    results.put(
        (
            "server",
            {
                "setup_s": t1 - t0,
                "waited_s": t2 - t1,
                "process_request_s": t3 - t2,
                "setup_bytes": len(setup),
                "response_bytes": len(response),
                "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            },
        )
    )


def client_main(ids: list[str], conn: Connection, start: Event, results: Queue[Result]) -> None:
    psi = openmined_psi()
    c = psi.client.CreateWithNewKey(True)
    start.wait()
    t0 = time.monotonic()
    request = c.CreateRequest(ids).SerializeToString()
    t1 = time.monotonic()
    conn.send_bytes(request)
    setup = psi.ServerSetup()
    setup.ParseFromString(conn.recv_bytes())
    response = psi.Response()
    response.ParseFromString(conn.recv_bytes())
    t2 = time.monotonic()
    intersection = c.GetIntersection(setup, response)
    t3 = time.monotonic()
    results.put(
        (
            "client",
            {
                "request_s": t1 - t0,
                "waited_s": t2 - t1,
                "get_intersection_s": t3 - t2,
                "request_bytes": len(request),
                "intersection": len(intersection),
                "done": t3,
                "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            },
        )
    )


def main() -> None:
    """Both sides forked with their IDs already in memory, then started together: reading is not timed."""
    psi = openmined_psi()
    if sys.argv[1] == "--synthetic":
        server_ids, client_ids = synthetic(int(sys.argv[2]))
    else:
        server_ids, client_ids = read_ids(sys.argv[1]), read_ids(sys.argv[2])
    ctx = mp.get_context("fork")
    a, b = ctx.Pipe()
    start, results = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=server_main, args=(server_ids, len(client_ids), a, start, results)),
        ctx.Process(target=client_main, args=(client_ids, b, start, results)),
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # both children forked and holding their IDs
    t0 = time.monotonic()
    start.set()
    got: dict[str, Any] = dict(results.get() for _ in procs)
    for p in procs:
        p.join()
    got["wall_s"] = got["client"].pop("done") - t0
    got["ids"] = [len(server_ids), len(client_ids)]
    got["version"] = psi.__version__
    print(json.dumps(got))


if __name__ == "__main__":
    main()
