"""``vfl-jobs``: submit, list, follow and cancel jobs on a long-running vfl-server, over ``JobClient``.

    vfl-jobs submit jobs/digits.toml [--watch] [--json]  # prints the job id (--json: the job as JSON)
    vfl-jobs list [--state training ...] [--limit 20] [--json]
    vfl-jobs show ID [--json]
    vfl-jobs watch ID [--json]                   # a progress bar on a terminal, else (or --json) JSON lines
    vfl-jobs cancel ID [--json]                  # prints the job's new state

The Control API takes an operator certificate (``vfl-certs operator NAME``). The connection flags
go before or after the subcommand: ``--server`` (env VFL_SERVER, default 127.0.0.1:50051), ``--ca``
(VFL_CA, default certs/ca.pem), ``--cert`` and ``--key`` (VFL_CERT, VFL_KEY; required), or
``--insecure`` (development only); the log flags (``--log-level``, ``--log-format``) go before it.
Results go to stdout, logs and errors to stderr; with ``submit --watch`` on a non-terminal the job
id goes to stderr, so stdout stays pure JSON lines.

Exit codes:

    0    done; for ``watch`` and ``submit --watch``: the job finished
    1    the job failed or was cancelled (``watch``); or the server said no (unknown
         job, duplicate job id, a job that has already ended, not an operator certificate), or it
         could not be reached
    2    usage or configuration: bad flags, no certificate, a missing or unreadable certificate or
         job file, or a job document the server refused as invalid
    3    ``watch``: the server stopped while the job was not over ("the server stopped; the job
         resumes when it restarts"); watch it again once the server is back
    130  Ctrl-C (the job itself goes on: ``vfl-jobs cancel ID`` stops it)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from vflclient import Job, JobClient, JobEvent, ServerUnavailable, TlsFiles, VflError
from vflcore.errors import ConfigError, TlsConfigError
from vflcore.runtime import cli_flags as flags
from vflcore.runtime import daemon

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = daemon.EXIT_CONFIG
#: ``watch``: the server stopped (or went away) under it; the job is not over, it goes on at the next start.
EXIT_SERVER_STOPPED = daemon.EXIT_UNREACHABLE
EXIT_INTERRUPTED = daemon.EXIT_SIGINT

#: How the server's own stop begins its refusal of a Watch (vflserver.jobs.control); any other
#: UNAVAILABLE under a watch is a lost connection.
SHUTTING_DOWN = "the server is shutting down"

DEFAULT_SERVER = "127.0.0.1:50051"
DEFAULT_CA = "certs/ca.pem"
NO_CERTIFICATE = (
    "pass --cert/--key (or VFL_CERT/VFL_KEY) with an operator certificate; make one with: vfl-certs operator NAME"
)

#: The metric `list` shows, the first of these a job reports (else its first metric by name).
_MAIN_METRICS = ("accuracy", "auc", "f1", "r2", "mse")


# ---- rendering: events, jobs ------------------------------------------------------------------


def render_json_lines(events: Iterable[JobEvent], stream: TextIO) -> None:
    """One JSON object per event per line, flushed at once so a pipe sees each event as it happens."""
    for event in events:
        stream.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
        stream.flush()


def render_tty(events: Iterable[JobEvent], stream: TextIO) -> None:
    """A progress bar over the job's epochs with the last epoch's metrics; state changes above it."""
    bar: Any = None
    try:
        for event in events:
            if bar is None:  # the first event says how many epochs (0: unknown, a bar without a total)
                bar = tqdm(total=event.epochs or None, desc=event.job_id, unit="epoch", file=stream, mininterval=0)
            if event.kind == "epoch" and event.epoch is not None:
                bar.update(event.epoch.epoch + 1 - bar.n)
                bar.set_postfix_str(event.epoch.losses())
            else:
                bar.write(_stamped(event), file=stream)
    finally:
        if bar is not None:
            bar.close()


def jobs_table(jobs: Sequence[Job]) -> str:
    """`list`'s table: one row per job, newest first as the server sends them."""
    rows = [
        [
            job.id,
            job.algorithm,
            job.state,
            f"{job.epochs_done}/{job.epochs}",
            job.submitter,
            _time(job.submitted_at),
            _main_metric(job.final_metrics),
        ]
        for job in jobs
    ]
    return _table(["ID", "ALGORITHM", "STATE", "EPOCHS", "SUBMITTER", "SUBMITTED", "METRIC"], rows)


def job_details(job: Job) -> str:
    """`show`'s text: every field, the final metrics, the error and the epoch history."""
    fields = [
        ("id", job.id),
        ("algorithm", job.algorithm),
        ("state", job.state),
        ("message", job.state_message or "-"),
        ("submitter", job.submitter),
        ("submitted", _time(job.submitted_at)),
        ("started", _time(job.started_at)),
        ("ended", _time(job.ended_at)),
        ("epochs", f"{job.epochs_done}/{job.epochs}"),
        ("served", f"yes, {job.serving}" if job.served and job.serving else "yes" if job.served else "no"),
        ("final metrics", " ".join(f"{k} {v:.4g}" for k, v in job.final_metrics.items()) or "-"),
        *_student_line(job),
        ("error", job.error or "-"),
    ]
    lines = [f"{name:<14}{value}" for name, value in fields]
    lines += ["document", *("  " + line for line in json.dumps(job.document, indent=2, sort_keys=True).splitlines())]
    if job.history:
        names = sorted({name for epoch in job.history for name in epoch.metrics})
        rows = [
            [
                str(e.epoch + 1),
                f"{e.train_loss:.4g}",
                f"{e.test_loss:.4g}",
                *(f"{e.metrics[n]:.4g}" if n in e.metrics else "-" for n in names),
                f"{e.seconds:.1f}",
                f"{e.wire_bytes / 1e6:.2f}",
            ]
            for e in job.history
        ]
        headers = ["EPOCH", "TRAIN_LOSS", "TEST_LOSS", *(n.upper() for n in names), "SECONDS", "WIRE_MB"]
        lines += ["", _table(headers, rows)]
    return "\n".join(lines) + "\n"


def _student_line(job: Job) -> list[tuple[str, str]]:
    """A ``[distill]`` job's student, served as ``<id>-student``: its held-out metrics; nothing without one."""
    if not job.student_metrics:
        return []
    metrics = " ".join(f"{k} {v:.4g}" for k, v in job.student_metrics.items())
    return [("student", f"{job.id}-student, the active party alone, on the same rows: {metrics}")]


def _stamped(event: JobEvent) -> str:
    return f"{time.strftime('%H:%M:%S', time.localtime(event.at))} {event}"


def _time(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def _main_metric(metrics: dict[str, float]) -> str:
    name = next((n for n in _MAIN_METRICS if n in metrics), min(metrics, default=""))
    return f"{name} {metrics[name]:.4g}" if name else "-"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [headers, *rows])
    return "\n".join(line.rstrip() for line in lines)


# ---- the commands -----------------------------------------------------------------------------


def _submit(client: JobClient, args: argparse.Namespace, out: TextIO) -> int:
    job = client.submit(Path(args.file))
    said = json.dumps(job.to_json(), sort_keys=True) if args.json else job.id
    if not args.watch:
        print(said, file=out)
        return EXIT_OK
    print(said, file=out if out.isatty() and not args.json else sys.stderr)
    return _follow(client, job.id, out, json_lines=args.json)


def _list(client: JobClient, args: argparse.Namespace, out: TextIO) -> int:
    jobs = client.list(args.state or (), args.limit)
    if args.json:
        for job in jobs:
            print(json.dumps(job.to_json(), sort_keys=True), file=out)
    else:
        print(jobs_table(jobs), file=out)
    return EXIT_OK


def _show(client: JobClient, args: argparse.Namespace, out: TextIO) -> int:
    job = client.get(args.id)
    out.write(json.dumps(job.to_json(), sort_keys=True) + "\n" if args.json else job_details(job))
    return EXIT_OK


def _watch(client: JobClient, args: argparse.Namespace, out: TextIO) -> int:
    return _follow(client, args.id, out, json_lines=args.json)


def _follow(client: JobClient, job_id: str, out: TextIO, *, json_lines: bool = False) -> int:
    """Render the job's events until it ends: 0 it finished, 3 the server stopped under the watch, 1 otherwise.

    A server that stops sends a running job's ``interrupted`` event and then goes: asking it how the
    job ended would only fail to connect. The job is not over, it resumes at the next start, so
    the watch says that and exits 3, which a script can tell from a failed job.
    """
    last: list[JobEvent] = []

    def remembered(events: Iterable[JobEvent]) -> Iterator[JobEvent]:
        for event in events:
            last[:] = [event]
            yield event

    try:
        render = render_json_lines if json_lines or not out.isatty() else render_tty
        render(remembered(client.watch(job_id)), out)
    except ServerUnavailable as exc:
        if not last:  # never reached it: the usual error, exit 1
            raise
        if SHUTTING_DOWN in str(exc):  # a job the stop does not interrupt (queued): the server says so
            print(f"vfl-jobs: {exc}", file=sys.stderr)
        else:  # a crash, kill -9 or the network: gRPC says only "Stream removed (Socket closed)"
            print(
                f"vfl-jobs: lost the connection to the server while job {job_id} was not over (the server went "
                "away: a crash, a kill or the network); the job stays in its store and resumes when the server is "
                f"back: `vfl-jobs watch {job_id}` follows it then",
                file=sys.stderr,
            )
        return EXIT_SERVER_STOPPED
    if last and last[0].kind == "state" and last[0].state == "interrupted":
        print(
            "vfl-jobs: the server stopped; the job resumes when it restarts "
            f"(`vfl-jobs watch {job_id}` follows it then)",
            file=sys.stderr,
        )
        return EXIT_SERVER_STOPPED
    job = client.get(job_id)
    if not job.ended:
        print(f"vfl-jobs: the server ended the watch while job {job_id} is still {job.state}", file=sys.stderr)
    return EXIT_OK if job.state == "finished" else EXIT_FAILED


def _cancel(client: JobClient, args: argparse.Namespace, out: TextIO) -> int:
    job = client.cancel(args.id)
    print(json.dumps(job.to_json(), sort_keys=True) if args.json else f"{job.id} {job.state}", file=out)
    return EXIT_OK


# ---- flags ------------------------------------------------------------------------------------


def _add_connection_flags(p: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The flags that reach the server; without ``defaults`` (after the subcommand) an absent flag keeps
    the value given before the subcommand."""

    def default(value: str | bool | None) -> Any:
        return value if defaults else argparse.SUPPRESS

    env = os.environ.get
    p.add_argument("--server", default=default(env("VFL_SERVER") or DEFAULT_SERVER), help="HOST:PORT (env VFL_SERVER)")
    p.add_argument("--ca", default=default(env("VFL_CA") or DEFAULT_CA), help="project CA (env VFL_CA)")
    p.add_argument("--cert", default=default(env("VFL_CERT")), help="operator certificate (env VFL_CERT)")
    p.add_argument("--key", default=default(env("VFL_KEY")), help="its private key (env VFL_KEY)")
    flags.add_insecure(p, default=default(False))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vfl-jobs",
        description="Submit, list, follow and cancel jobs on a vfl-server (needs an operator certificate).",
        epilog="Exit codes: 0 done (watch: the job finished), 1 the job failed or was cancelled, or the server said "
        "no or was unreachable, 2 usage or configuration, 3 (watch) the server stopped under the watch: the job "
        "goes on when it restarts, 130 Ctrl-C.",
    )
    _add_connection_flags(p, defaults=True)
    daemon.add_logging_flags(p)
    common = argparse.ArgumentParser(add_help=False)
    _add_connection_flags(common, defaults=False)
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[..., int], summary: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=summary, description=summary)
        sub.set_defaults(run=run)
        return sub

    submit = command("submit", _submit, "queue a job from a TOML job file and print its id")
    submit.add_argument("file", help="the job file ([job], [algorithm], [model], [serving] tables)")
    submit.add_argument("--watch", action="store_true", help="then follow it as `watch` does")
    submit.add_argument(
        "--json",
        action="store_true",
        help="the queued job as one JSON object (with --watch: on stderr, then JSON lines)",
    )

    listing = command("list", _list, "list jobs, newest first")
    listing.add_argument("--state", action="append", metavar="STATE", help="only jobs in this state (repeatable)")
    listing.add_argument("--limit", type=int, default=0, help="at most N jobs (default: all)")
    listing.add_argument("--json", action="store_true", help="one JSON object per job per line")

    show = command("show", _show, "show one job: every field, final metrics, error and epoch history")
    show.add_argument("id", help="the job id")
    show.add_argument("--json", action="store_true", help="as one JSON object")

    watch = command("watch", _watch, "follow a job until it ends: a progress bar on a terminal, JSON lines otherwise")
    watch.add_argument("id", help="the job id")
    watch.add_argument(
        "--json", action="store_true", help="JSON lines even on a terminal (they are the default elsewhere)"
    )

    cancel = command("cancel", _cancel, "stop a queued or running job and print its new state")
    cancel.add_argument("id", help="the job id")
    cancel.add_argument("--json", action="store_true", help="the job as one JSON object, as `show --json` prints it")
    return p


def _tls(args: argparse.Namespace) -> TlsFiles | None:
    if args.insecure:
        return None
    if not args.cert or not args.key:
        raise ConfigError(NO_CERTIFICATE)
    return TlsFiles(Path(args.ca), Path(args.cert), Path(args.key))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        daemon.setup_logging(args)
        tls = _tls(args)
        if args.insecure:
            print("vfl-jobs: WARNING: --insecure: plaintext, no certificates; development only", file=sys.stderr)
        with JobClient(args.server, tls=tls, insecure=args.insecure) as client:
            code: int = args.run(client, args, sys.stdout)
            return code
    except KeyboardInterrupt:
        print("vfl-jobs: interrupted; a submitted job goes on (`vfl-jobs cancel ID` stops it)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, TlsConfigError, ValueError) as exc:
        print(f"vfl-jobs: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except VflError as exc:
        print(f"vfl-jobs: {exc}", file=sys.stderr)
        return EXIT_FAILED
