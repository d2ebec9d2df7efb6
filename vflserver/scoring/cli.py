"""``vfl-score``: score a whole customer base with the active party's standalone model.

    vfl-score --model runs/<job>/party-1/model.onnx --input customers/ --output scores/
    vfl-score --model triton-repo/ --input customers/ --output scores/ --engine ray --ray-address ray://head:10001

The model is one ``vfl-serve`` serves (an APFed job's ``model.onnx``, a ``[distill]`` job's student,
``party-1/student/model.onnx``, or a Triton model repository holding either): it needs the active
party's own features only, so no passive party is involved and nothing leaves the party.
``--input`` is a folder of Parquet files (or one file) holding the ID column and the model's
feature columns; ``--output`` gets one Parquet file per input row group with the ID column and
the scores (``vflserver.scoring.units``). The engine is
``[compute] engine`` of ``--config`` (a server config), overridden by ``--engine``; ``local``
scores in this process, ``ray`` with Ray Data on the party's cluster, with identical scores.

Exit codes as the daemons': 0 done, 2 a model, input or config problem (the message names the
file and the column), 3 no Ray cluster at the address.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import structlog

from vflcore.errors import ConfigError, VflError
from vflcore.runtime import cli_flags as flags
from vflcore.runtime import daemon
from vflcore.runtime.compute import ENGINES, connect
from vflcore.runtime.config import compute_engine
from vflserver.scoring.engines import score_table_folder
from vflserver.scoring.model import ScoringModel

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vfl-score",
        description="Score a folder of Parquet files with a model the active party runs alone: an APFed job's "
        "model, or a [distill] job's student (runs/<job>/party-1/student/model.onnx).",
    )
    p.add_argument(
        "--model",
        type=Path,
        required=True,
        help="runs/<job>/party-1/model.onnx (APFed), runs/<job>/party-1/student/model.onnx (a [distill] "
        "student), or a Triton model repository holding one (the repository or its model folder)",
    )
    p.add_argument("--input", type=Path, required=True, help="a folder of Parquet files (or one file) to score")
    p.add_argument("--output", type=Path, required=True, help="a new or empty folder for the score files")
    p.add_argument("--id-column", default="id", help="the input's ID column, copied next to the scores (default: id)")
    flags.add_config(p, "server TOML file: its [compute] engine and ray_address are used")
    flag = functools.partial(flags.add_config_flag, p)
    flag("--engine", ("compute", "engine"), choices=ENGINES, help="local (this process) or ray (Ray Data)")
    flag("--ray-address", ("compute", "ray_address"), help="the Ray cluster, e.g. ray://head:10001 (with --engine ray)")
    daemon.add_logging_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        daemon.setup_logging(args)
    except (ConfigError, ValueError) as exc:  # an unknown --log-level
        print(f"vfl-score: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    try:
        engine = compute_engine(flags.document(args), args.config)
        if engine.on_ray:
            connect(engine)  # first: an unreachable cluster is exit 3 at once, before any file is read
        model = ScoringModel.load(args.model)
        report = score_table_folder(model, args.input, args.output, id_column=args.id_column, engine=engine)
    except ConnectionError as exc:
        print(f"vfl-score: {exc}", file=sys.stderr)
        return daemon.EXIT_UNREACHABLE
    except (VflError, OSError) as exc:
        print(f"vfl-score: {exc}", file=sys.stderr)
        return daemon.EXIT_CONFIG
    print(
        f"vfl-score: {report.rows:,} rows in {report.units} row group(s) scored into {report.output} "
        f"({report.engine}, {report.seconds:.1f} s)",
        flush=True,
    )
    return daemon.EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
