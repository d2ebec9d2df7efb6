"""Hypothesis strategies for the inputs that are not one protobuf message: files, IDs, tables, routes, PSI streams.

``strategies.py`` draws the messages of the RPCs. These draw what came since (issue 41):

- ``id_strings``: sample IDs as banks have them and worse: any script, any length (empty and
  past ``MAX_ID_BYTES`` included), control characters, lone surrogates;
- ``table_files``: a party's table as CSV or Parquet bytes, valid or broken (truncated, a wrong
  type in a cell, a huge cell, invalid UTF-8, a repeated or missing header, random bytes);
- ``psi_streams`` and ``psi_requests``: PSI's chunked messages numbered out of order, repeated,
  skipped and far past the window, as a party whose flow control went wrong sends them;
- ``console_routes``: requests to the operator's console, odd routes and methods included;
- ``job_table_mutants``: a job's ``[privacy]`` and ``[distill]`` tables with any value;
- ``party_config_mutants``: a passive party's config with any ``[privacy]`` (and ``[client]``) values.

Every mutation of a list is valid after any other, in any order (``tests/unit/vfltesting/test_fuzz_strategies.py``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from vflcore.data.id_arrays import MAX_ID_BYTES
from vflcore.proto import federation_pb2 as pb
from vflcore.wire import names
from vflcore.wire import serde as wire
from vflcore.wire.tensors import TensorKey

# ---- IDs --------------------------------------------------------------------------------------------

#: IDs as users have them: e-mail addresses, UUIDs, names in any script.
_USUAL_IDS = st.sampled_from(
    [
        "jörg.müller@bank.example",
        "3f2b8c1e-9a4d-4e6f-8b7a-2c1d0e9f8a7b",
        "李小龙-0042",
        "مريم@example.sa",
        "Ὀδυσσεύς",
        "🙂 customer",
        "a" * MAX_ID_BYTES,
        "é" * (MAX_ID_BYTES // 2),
    ]
)


def id_strings(*, valid_only: bool = False) -> st.SearchStrategy[str]:
    """One sample ID: usual ones, any text (every plane), and, unless ``valid_only``, ones the reader refuses.

    Refused: empty, longer than ``MAX_ID_BYTES`` in UTF-8, a control character, a lone surrogate
    (no UTF-8 at all).
    """
    any_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=80)
    valid = (_USUAL_IDS | any_text).filter(lambda s: 0 < len(s.encode()) <= MAX_ID_BYTES and s.strip() == s)
    if valid_only:
        return valid
    refused = st.sampled_from(["", " ", "a\x00b", "tab\there", "x" * (MAX_ID_BYTES + 1), "\ud800", "é" * 129])
    return valid | refused | st.text(max_size=300)


# ---- table files ----------------------------------------------------------------------------------------

TABLE_MUTATIONS = ("truncate", "utf8", "huge", "type", "header", "nul", "bom", "quote", "drop_id", "empty")


@st.composite
def table_files(draw: st.DrawFn, mutations: st.SearchStrategy[list[str]] | None = None) -> tuple[str, bytes]:
    """A party's table as a file: (".csv" or ".parquet", its bytes), valid or broken by ``mutations``."""
    rows = draw(st.integers(1, 12))
    ids = draw(st.lists(id_strings(), min_size=rows, max_size=rows))
    labels = draw(st.lists(st.integers(0, 1) | st.sampled_from([2, -1, 7]), min_size=rows, max_size=rows))
    features = [[draw(st.floats(-1e6, 1e6, allow_nan=False)) for _ in range(3)] for _ in range(rows)]
    if draw(st.booleans()):
        return ".parquet", draw(_parquet(ids, labels, features))
    header = ["id", "label", "f0", "f1", "f2"]
    body = [[i, str(y), *(repr(v) for v in row)] for i, y, row in zip(ids, labels, features, strict=True)]
    for mutation in draw(
        mutations if mutations is not None else st.lists(st.sampled_from(TABLE_MUTATIONS), max_size=3)
    ):
        header, body = _mutate_table(draw, header, body, mutation)
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerows([header, *body])
    data = text.getvalue().encode("utf-8", "surrogatepass")
    if draw(st.booleans()):  # a break of the bytes themselves, after the text was written
        data = _mutate_bytes(draw, data)
    return ".csv", data


def _mutate_table(
    draw: st.DrawFn, header: list[str], body: list[list[str]], mutation: str
) -> tuple[list[str], list[list[str]]]:
    """One break of a CSV's header or cells, whatever the breaks before it left (no rows, no columns, ...)."""
    width = len(header)
    if mutation == "header" and header:
        header = [*header, draw(st.sampled_from(header))]  # a repeated column name
    elif mutation == "drop_id" and "id" in header:
        at = header.index("id")
        header = header[:at] + header[at + 1 :]
        body = [row[:at] + row[at + 1 :] for row in body]
    elif mutation == "empty":
        body = []
    elif body and width:
        row, column = draw(st.integers(0, len(body) - 1)), draw(st.integers(0, width - 1))
        cells = body[row]
        if column < len(cells):
            if mutation == "type":
                cells[column] = draw(st.sampled_from(["abc", "1e999", "nan", "", "0x10", "1,5", "true"]))
            elif mutation == "huge":
                cells[column] = "9" * draw(st.sampled_from([1 << 10, 1 << 16, 1 << 17]))
            elif mutation == "utf8":
                cells[column] = cells[column] + "\udcff"  # written as a lone byte: invalid UTF-8
            elif mutation == "nul":
                cells[column] = cells[column] + "\x00"
            elif mutation == "quote":
                cells[column] = '"' + cells[column]
            elif mutation == "bom":
                header = ["\ufeff" + header[0], *header[1:]] if header else header
            elif mutation == "truncate":
                body = body[: row + 1]
                body[row] = cells[: column + 1]
    return header, body


def _mutate_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["cut", "flip", "random"]))
    if kind == "cut":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    return draw(st.binary(max_size=200))


@st.composite
def _parquet(draw: st.DrawFn, ids: list[str], labels: list[int], features: list[list[float]]) -> bytes:
    """A Parquet file of these rows, with the columns' types drawn (an ID of numbers, a label of text, ...)."""
    safe_ids = [i.encode("utf-8", "replace").decode() for i in ids]
    columns: dict[str, Any] = {
        "id": draw(
            st.sampled_from(
                [
                    pa.array(safe_ids),
                    pa.array([len(i) for i in ids], pa.int64()),
                    pa.array([float(len(i)) for i in ids]),
                    pa.array([i.encode("utf-8", "replace") for i in ids], pa.binary()),
                    pa.array([None] * len(ids), pa.string()),
                ]
            )
        ),
        "label": draw(
            st.sampled_from([pa.array(labels), pa.array([str(y) for y in labels]), pa.array(labels, pa.float64())])
        ),
    }
    for j in range(3):
        values = [row[j] for row in features]
        columns[f"f{j}"] = draw(st.sampled_from([pa.array(values), pa.array([str(v) for v in values])]))
    names = list(columns)
    if draw(st.booleans()):
        names[-1] = draw(st.sampled_from(names[:-1]))  # a repeated column name
    table = pa.Table.from_arrays(list(columns.values()), names=names)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    data = sink.getvalue()
    return _mutate_bytes(draw, data) if draw(st.booleans()) else data


# ---- PSI's chunk streams -------------------------------------------------------------------------------

PSI_UPLOADS = (names.PSI_CLIENT_BLINDED, names.PSI_SERVER_DOUBLE_BLINDED, names.PSI_ALIGNED_DIGEST)
PSI_DOWNLOADS = (names.PSI_CLIENT_TAKEN, names.PSI_SERVER_BLINDED, names.PSI_MEMBERS)


def _chunk_numbers() -> st.SearchStrategy[list[int]]:
    """Chunk numbers as a broken flow control sends them: out of order, repeated, skipped, far ahead."""
    return st.lists(st.integers(0, 7) | st.sampled_from([2**31 - 1, 2**32 - 1]), min_size=1, max_size=6)


@st.composite
def psi_streams(draw: st.DrawFn, job_ids: list[str], safe: Callable[[TensorKey], TensorKey]) -> list[pb.TensorChunk]:
    """One PsiUpload stream of several PSI chunks: any order, repeats, gaps, wrong widths and names."""
    name = draw(st.sampled_from(PSI_UPLOADS) | st.text(max_size=12))
    job = draw(st.sampled_from(job_ids))
    chunks: list[pb.TensorChunk] = []
    for number in draw(_chunk_numbers()):
        items, width = draw(st.integers(0, 4)), draw(st.sampled_from([32, 12, 31, 33, 0]))
        points = np.frombuffer(draw(st.binary(min_size=items * width, max_size=items * width)), np.uint8)
        key = safe(TensorKey(job, draw(st.sampled_from([0, 1])), number, name))
        chunks.extend(wire.tensor_to_chunks(key, points.reshape(items, width)))
    return chunks


@st.composite
def psi_requests(draw: st.DrawFn, job_ids: list[str], safe: Callable[[TensorKey], TensorKey]) -> pb.TensorRequest:
    """A PsiDownload for a PSI chunk out of order: any number, any name, any count."""
    key = safe(
        TensorKey(draw(st.sampled_from(job_ids)), 0, draw(_chunk_numbers())[0], draw(st.sampled_from(PSI_DOWNLOADS)))
    )
    names_ = draw(st.lists(st.sampled_from(PSI_DOWNLOADS) | st.text(max_size=8), max_size=3))
    return pb.TensorRequest(key=wire.key_to_proto(key), names=names_, count=draw(st.integers(0, 3)))


# ---- the console ----------------------------------------------------------------------------------------


@st.composite
def console_routes(draw: st.DrawFn, job_ids: list[str]) -> tuple[str, str]:
    """(method, path) for the console: its pages, any job id, odd segments, query strings and methods."""
    pages = ["", "jobs", "parties", "server", "events", "console.js", "console.css", "..", "%2e%2e", "%00", "jobs/"]
    segments = draw(
        st.lists(st.sampled_from(pages) | st.sampled_from(job_ids) | st.text(max_size=12), min_size=1, max_size=4)
    )
    path = "/" + "/".join(segments)
    if draw(st.booleans()):
        path += "?" + draw(st.sampled_from(["x=1", "a=" + "b" * 4000, "%ff", "="]))
    return draw(st.sampled_from(["GET", "GET", "HEAD", "POST", "DELETE", "OPTIONS"])), path


# ---- settings tables ------------------------------------------------------------------------------------

_VALUES = st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats() | st.text(max_size=12)
_VALUE = st.recursive(
    _VALUES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=4,
)


@st.composite
def table_mutants(draw: st.DrawFn, valid: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``valid`` (a settings table) with keys removed, retyped, set to edge values or added: one to four changes."""
    table = dict(valid)
    edges = st.sampled_from([0, -1, 1e-300, 1e300, float("inf"), float("nan"), -0.0, 2**63, "", "none", True])
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from([*keys, "no_such_key"]))
        action = draw(st.sampled_from(["set", "set", "edge", "drop"]))
        if action == "drop":
            table.pop(key, None)
        else:
            table[key] = draw(edges if action == "edge" else _VALUE)
    return table


def job_table_mutants(
    valid: dict[str, dict[str, Any]], privacy_keys: tuple[str, ...], distill_keys: tuple[str, ...]
) -> st.SearchStrategy[dict[str, dict[str, Any]]]:
    """A job document whose ``[privacy]`` or ``[distill]`` table (or both) is mutated; the rest as ``valid``."""

    def document(privacy: dict[str, Any], distill: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
        doc = {**valid, "privacy": privacy}
        if distill is not None:
            doc["distill"] = distill
        return doc

    return st.builds(
        document,
        table_mutants(valid.get("privacy", {}), privacy_keys) | st.just(valid.get("privacy", {})),
        st.none() | table_mutants(valid.get("distill", {}), distill_keys),
    )


def party_config_mutants(
    valid: dict[str, dict[str, Any]], privacy_keys: tuple[str, ...], client_keys: tuple[str, ...]
) -> st.SearchStrategy[dict[str, dict[str, Any]]]:
    """A passive party's config document whose ``[privacy]`` and ``[client]`` tables are mutated."""
    return st.builds(
        lambda privacy, client: {**valid, "privacy": privacy, "client": client},
        table_mutants(valid.get("privacy", {}), privacy_keys),
        table_mutants(valid["client"], client_keys) | st.just(valid["client"]),
    )
