"""SecretFlow's two-party PSI (``spu.psi`` 0.9.5) on one pair of ID CSVs: rank 0 and rank 1 as two OS processes.

Run by path with the python of spu's own virtualenv (``bench.psi.secretflow_comparison``), never
imported by the bench: that venv has spu (which pins numpy<2 and jax<=0.4.34) and nothing of this
project, so this file imports only the standard library and spu.

The two parties talk over spu's own link (``spu.libspu.link.create_brpc``, brpc on two localhost
ports, no TLS) and each reads only its own CSV (``id`` column). The settings are the ones that make
its run do what ours does: rank 0 receives and the result is broadcast (both parties learn the
intersection, as both of ours do), and the output is aligned (both parties' output rows in the same
order, as our aligned lists are). ``keys_unique`` is set: the bench's IDs are unique by construction,
so spu skips its duplicate handling (its fastest path).

Usage:

- ``secretflow.py run PROTOCOL CSV0 CSV1 WORKDIR TIMEOUT_S``: starts both parties, reaps each with
  ``os.wait4`` (CPU seconds and peak RSS of that child) and prints one JSON line: per party its
  process wall, ``psi_execute`` seconds, CPU, peak RSS and intersection size, and ``wall_s``, from the
  first party entering ``psi_execute`` to the last one leaving it (reading the CSVs, the protocol,
  aligning and writing the output: what spu does for a PSI; not interpreter start-up or imports).
- ``secretflow.py party PROTOCOL RANK PORT0 PORT1 CSV OUT``: one party (what ``run`` starts).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# bench name -> (spu PsiProtocol, ECDH curve or None)
PROTOCOLS: dict[str, tuple[str, str | None]] = {
    "ecdh-25519": ("PROTOCOL_ECDH", "CURVE_25519"),
    "ecdh-25519-elligator2": ("PROTOCOL_ECDH", "CURVE_25519_ELLIGATOR2"),
    "ecdh-fourq": ("PROTOCOL_ECDH", "CURVE_FOURQ"),
    "kkrt": ("PROTOCOL_KKRT", None),
    "rr22": ("PROTOCOL_RR22", None),
}
RECV_TIMEOUT_MS = 30 * 60 * 1000  # a party may wait on the other for minutes at 1M (the other one sorting)


def spu_modules() -> tuple[Any, Any, str]:
    """(spu.psi, spu.libspu.link, spu's version), imported when a party starts: this file also imports without spu."""
    import spu  # type: ignore[import-not-found]
    import spu.libspu.link as link  # type: ignore[import-not-found]
    import spu.psi as psi  # type: ignore[import-not-found]

    return psi, link, str(spu.__version__)


def free_port() -> int:
    """A port the kernel has just handed out on 127.0.0.1 (free again once closed; good enough on one box)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def link_context(link: Any, rank: int, ports: tuple[int, int]) -> Any:
    """spu's brpc link between the two ranks on localhost; returns once both are connected."""
    desc = link.Desc()
    desc.id = f"bench-psi-{ports[0]}-{ports[1]}"
    for r, port in enumerate(ports):
        desc.add_party(f"rank{r}", f"127.0.0.1:{port}")
    desc.connect_retry_times = 120
    desc.connect_retry_interval_ms = 500
    desc.recv_timeout_ms = RECV_TIMEOUT_MS
    desc.http_timeout_ms = RECV_TIMEOUT_MS
    return link.create_brpc(desc, rank)


def execute_config(psi: Any, protocol: str, csv: str, out: str) -> Any:
    """The ``PsiExecuteConfig`` of one party: rank 0 receives, result broadcast, output aligned."""
    spu_protocol, curve = PROTOCOLS[protocol]
    ecdh = psi.EcdhParams(curve=psi.parse_curve_type(curve)) if curve else psi.EcdhParams()
    return psi.PsiExecuteConfig(
        protocol_conf=psi.PsiProtocolConfig(
            protocol=psi.parse_protocol(spu_protocol),
            receiver_rank=0,
            broadcast_result=True,
            ecdh_params=ecdh,
        ),
        input_params=psi.InputParams(
            type=psi.SourceType.SOURCE_TYPE_FILE_CSV, path=csv, selected_keys=["id"], keys_unique=True
        ),
        output_params=psi.OutputParams(type=psi.SourceType.SOURCE_TYPE_FILE_CSV, path=out, disable_alignment=False),
    )


def count_rows(path: str) -> int:
    """Data rows of a CSV with a header: the intersection as written, to check against spu's report."""
    with open(path, "rb") as fh:
        return sum(1 for _ in fh) - 1


def party_main(protocol: str, rank: int, ports: tuple[int, int], csv: str, out: str) -> None:
    """One party: connect, run ``psi_execute`` timed, print its JSON line."""
    psi, link, version = spu_modules()
    lctx = link_context(link, rank, ports)
    config = execute_config(psi, protocol, csv, out)
    start = time.time()  # wall clock: both parties are on this box, so their instants compare
    report = psi.psi_execute(config, lctx)
    end = time.time()
    lctx.stop_link()
    figures = {
        "rank": rank,
        "start": start,
        "end": end,
        "original": report.original_count,
        "intersection": report.intersection_count,
        "output_rows": count_rows(out),
        "version": version,
    }
    print(json.dumps(figures), flush=True)


def reap(procs: dict[int, subprocess.Popen[bytes]], timeout_s: float) -> dict[int, tuple[float, int, float, int]]:
    """{rank: (exit wall instant, exit code, CPU s, ru_maxrss KiB)} via ``os.wait4``; both killed on a timeout."""
    deadline = time.monotonic() + timeout_s
    done: dict[int, tuple[float, int, float, int]] = {}
    while len(done) < len(procs):
        for rank, proc in procs.items():
            if rank in done:
                continue
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                done[rank] = (time.time(), proc.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
        if time.monotonic() > deadline:
            for rank, proc in procs.items():
                if rank not in done:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
            raise SystemExit(f"SecretFlow PSI did not finish in {timeout_s:.0f} s; parties killed")
        time.sleep(0.05)
    return done


def log_tail(workdir: Path, rank: int) -> str:
    """The end of a party's stderr (spu logs there), for the error the bench prints."""
    return (workdir / f"rank{rank}.log").read_text(errors="replace")[-2000:]


def party_line(workdir: Path, rank: int) -> dict[str, Any]:
    """The JSON line a party printed, or an error with the tail of its log."""
    lines = [line for line in (workdir / f"rank{rank}.out").read_text().splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"rank {rank} printed no result; its log ends:\n{log_tail(workdir, rank)}")
    line: dict[str, Any] = json.loads(lines[-1])
    return line


def run_main(protocol: str, csvs: tuple[str, str], workdir: Path, timeout_s: float) -> None:
    """Both parties as OS processes, each with its own CSV; one JSON line with both parties' figures."""
    if protocol not in PROTOCOLS:
        raise SystemExit(f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
    workdir.mkdir(parents=True, exist_ok=True)
    inputs = []
    for rank, csv in enumerate(csvs):  # spu writes ``<input>.meta`` beside its input: keep it out of the bench's data
        link_path = workdir / f"rank{rank}-in.csv"
        link_path.unlink(missing_ok=True)
        link_path.symlink_to(Path(csv).resolve())
        inputs.append(str(link_path))
    ports = (free_port(), free_port())
    procs: dict[int, subprocess.Popen[bytes]] = {}
    started: dict[int, float] = {}
    for rank in (0, 1):
        argv = [sys.executable, __file__, "party", protocol, str(rank), str(ports[0]), str(ports[1])]
        argv += [inputs[rank], str(workdir / f"rank{rank}-out.csv")]
        with open(workdir / f"rank{rank}.out", "wb") as out, open(workdir / f"rank{rank}.log", "wb") as log:
            started[rank] = time.time()
            procs[rank] = subprocess.Popen(argv, stdout=out, stderr=log, cwd=workdir)
    exits = reap(procs, timeout_s)
    parties = []
    for rank in (0, 1):
        exited, code, cpu_s, maxrss_kib = exits[rank]
        if code != 0:
            raise SystemExit(f"rank {rank} exited with {code}; its log ends:\n{log_tail(workdir, rank)}")
        line = party_line(workdir, rank)
        parties.append(
            {
                "rank": rank,
                "process_wall_s": exited - started[rank],
                "psi_s": line["end"] - line["start"],
                "cpu_s": cpu_s,
                "maxrss_kib": maxrss_kib,
                "original": line["original"],
                "intersection": line["intersection"],
                "output_rows": line["output_rows"],
            }
        )
    lines = [party_line(workdir, rank) for rank in (0, 1)]
    wall_s = max(line["end"] for line in lines) - min(line["start"] for line in lines)
    result = {"protocol": protocol, "version": lines[0]["version"], "wall_s": wall_s, "parties": parties}
    print(json.dumps(result), flush=True)


def main() -> None:
    mode, protocol, *rest = sys.argv[1:]
    if mode == "party":
        rank, port0, port1, csv, out = rest
        party_main(protocol, int(rank), (int(port0), int(port1)), csv, out)
    elif mode == "run":
        csv0, csv1, workdir, timeout_s = rest
        run_main(protocol, (csv0, csv1), Path(workdir), float(timeout_s))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
