"""IDs as users have them, through every path of a job, checked against plain Python.

Hypothesis draws ID sets like banks' and shops' (e-mail addresses under a shared long domain,
customer numbers under a shared long prefix, UUIDs, SHA-256 hex digests, numbers with leading
zeros, non-ASCII text, commas, quotes and spaces, 1 to 256 bytes of UTF-8). For each set, three
parties hold overlapping parts of it, in their own row order: party 1 a Parquet file, parties 2
and 3 CSV files, written here with the standard library. The service runs as a user runs it
(``vfl-server`` and two ``vfl-client`` daemons over mTLS, the inference endpoint on), and a
SplitNN job with a distilled student trains on them. Then, against the set intersection:

- every party's ``aligned_ids.csv`` and its saved alignment, reloaded, are the intersection in
  sorted order (code-point order on ``str``, which is UTF-8 byte order);
- federated inference by ID, over gRPC (``InferenceClient``) and over REST, answers every
  aligned ID, the same labels both ways, and for the held-out IDs the labels of
  ``test_predictions.csv``;
- an ID that is not aligned (held by party 1 alone, or by nobody) is refused with the
  documented ``K of the N IDs cannot be served``, naming no ID;
- ``vfl-score`` scores party 1's Parquet file with the student: the IDs come back unchanged in
  file order, with the labels of the student's own ``test_predictions.csv``.

One set of daemons serves every example: the tables are rewritten in place between jobs and
the daemons read a table again when its file changes.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from vflclient import InferenceClient, JobClient, TensorRejected
from vflcore.data.tables import ids_digest, read_party_csv
from vflcore.psi.cache import alignment_key, load_alignment
from vflserver.inference.federated import IDS
from vflserver.inference.servable import LABEL
from vflserver.scoring import cli as score_cli
from vflserver.training.distillation import STUDENT_DIR
from vfltesting.datasets import example_ids
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, finish_job, job_document

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: Each drawn ID set costs a job (PSI, one epoch, a one-epoch student) and its checks: about 1 s on 2 cores.
EXAMPLES = 8
#: The IDs every party holds, at least: enough rows for a training split and a held-out one.
SHARED = 12
FEATURES = 3
#: The longest ID the readers take, in bytes of UTF-8 (issue 36: any ID of 1 to 256 bytes).
MAX_ID_BYTES = 256
#: The intersection's IDs held out (test_predictions.csv) and the student's epochs: small, fast.
JOB: dict[str, Any] = {"epochs": 1, "batch_size": 8, "test_fraction": 0.25, "embedding_dim": 4, "bottom_hidden": [8]}
DISTILL = {"epochs": 1}


def _fits(text: str) -> bool:
    """An ID the readers accept (docs/explanation/psi.md): 1-256 bytes of UTF-8, not blank, no control character."""
    return 0 < len(text.encode()) <= MAX_ID_BYTES and bool(text.strip())


#: Any text an ID may be: every code point but surrogates (no UTF-8) and controls (refused).
_TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=90)
_DIGITS = st.integers(0, 10**12)
ID_KINDS = st.one_of(
    st.builds(
        lambda local, n: f"{local}.{n:07d}@retail-banking.example.com",
        st.from_regex(r"[a-z]{1,12}", fullmatch=True),
        _DIGITS,
    ),
    st.builds(lambda n: f"customers/eu-west-1/segment-a/{n:012d}", _DIGITS),
    st.uuids(version=4).map(str),
    st.binary(min_size=32, max_size=32).map(bytes.hex),
    st.builds(lambda n, width: str(n).zfill(width), st.integers(0, 999), st.integers(1, 12)),
    st.builds(lambda text, n: f"{text}-{n}", st.text("Zoë東京ВИНОünïcødé 😀", min_size=1, max_size=20), _DIGITS),
    st.text(",\"' ab", min_size=1, max_size=8),
    st.builds(lambda pad, n: f"{pad}{n}", st.sampled_from(["x" * 240, "東" * 80, "😀" * 60]), st.integers(0, 999)),
    _TEXT,
).filter(_fits)


@dataclass(frozen=True)
class Holdings:
    """An ID universe and who holds what: ``held[k]`` are party k+1's IDs, in its file's order."""

    universe: tuple[str, ...]
    held: tuple[tuple[str, ...], ...]

    @property
    def intersection(self) -> list[str]:
        """The oracle: the IDs every party holds, in sorted (code-point) order."""
        common = set(self.held[0]).intersection(*self.held[1:])
        return sorted(common)

    def outsider(self) -> str:
        """An ID that is not aligned: held by some party but not all, or else by nobody."""
        common = set(self.intersection)
        return next((i for i in self.universe if i not in common), "nobody-" + "0" * 20)


@st.composite
def holdings(draw: st.DrawFn) -> Holdings:
    """Three parties' ID lists: the first SHARED IDs drawn are everyone's, the rest each party's by chance."""
    universe = draw(st.lists(ID_KINDS, min_size=SHARED, max_size=40, unique=True))
    held = []
    for _ in range(3):
        extra = [i for i in universe[SHARED:] if draw(st.booleans())]
        held.append(tuple(draw(st.permutations(universe[:SHARED] + extra))))
    return Holdings(tuple(universe), tuple(held))


def _realistic() -> Holdings:
    """The demo's own kind of IDs (e-mail-like, 24+ bytes, some non-ASCII): an example always run."""
    universe = example_ids(30)
    return Holdings(tuple(universe), (tuple(universe[::-1]), tuple(universe[:25]), tuple(universe[3:])))


def _write_tables(folder: Path, data: Holdings, stamp_ns: int) -> None:
    """party1.parquet (id, label, features), party2.csv and party3.csv (id, features), rewritten in place.

    Each ID's features and label follow from its place in the universe, the same at every party.
    Every file gets the modification time ``stamp_ns``, new for each set: a daemon reads a table
    again when that time changes, and two writes within one clock tick must not look alike.
    """
    rng = np.random.default_rng(len(data.universe))
    values = rng.normal(size=(len(data.universe), 3 * FEATURES)).astype(np.float32)
    place = {name: n for n, name in enumerate(data.universe)}
    for party, ids in enumerate(data.held, start=1):
        rows = [place[i] for i in ids]
        block = values[rows, (party - 1) * FEATURES : party * FEATURES]
        names = [f"p{party}f{c}" for c in range(FEATURES)]
        if party == 1:
            columns: dict[str, Any] = {"id": pa.array(ids, pa.string()), "label": pa.array([r % 2 for r in rows])}
            columns |= {name: pa.array(block[:, c]) for c, name in enumerate(names)}
            path = folder / "party1.parquet"
            pq.write_table(pa.table(columns), path)
        else:
            path = folder / f"party{party}.csv"
            with path.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.writer(fh)
                writer.writerow(["id", *names])
                writer.writerows([i, *map(repr, map(float, row))] for i, row in zip(ids, block, strict=True))
        os.utime(path, ns=(stamp_ns, stamp_ns))


class _MixedTables(ServiceRun):
    """The service with party 1's table in Parquet (``table_suffix``) and the passive parties' in CSV."""

    def client_config(self, party: int, server: str) -> Path:
        path = super().client_config(party, server)
        path.write_text(path.read_text().replace(f"party{party}.parquet", f"party{party}.csv"))
        return path


@dataclass
class _Service:
    """The module's daemons, the folder of the tables they read, and how many jobs ran."""

    run: ServiceRun
    data: Path
    jobs: int = 0

    def __repr__(self) -> str:  # a failing example's report names the ID set, not the daemons' details
        return f"<daemons of {self.run.root}, {self.jobs} jobs>"


@pytest.fixture(scope="module")
def service(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Service]:
    """The daemons, started once on a first ID set, for every drawn set after it."""
    root = tmp_path_factory.mktemp("ids")
    data = root / "data"
    data.mkdir()
    _write_tables(data, _realistic(), stamp_ns=10**18)
    run = _MixedTables(root / "service", pki, data, table_suffix=".parquet")
    run.root.mkdir()
    with run.started():
        yield _Service(run, data)


def _aligned_file(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["id"], rows[:1]
    return [row[0] for row in rows[1:]]


def _predictions_file(path: Path) -> dict[str, int]:
    with path.open(newline="", encoding="utf-8") as fh:
        return {row["id"]: int(row["prediction"]) for row in csv.DictReader(fh)}


def _rest(pki: Pki, port: int, model: str, ids: list[str]) -> tuple[int, dict[str, Any]]:
    """One KServe v2 JSON request over HTTPS with the caller's certificate: (status, document)."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    files = pki.caller_files("test-caller")
    context.load_cert_chain(str(files.cert), str(files.key))
    body = {"inputs": [{"name": IDS, "shape": [len(ids)], "datatype": "BYTES", "data": ids}]}
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
    try:
        connection.request("POST", f"/v2/models/{model}/infer", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _rest_labels(document: dict[str, Any]) -> list[int]:
    [label] = [output for output in document["outputs"] if output["name"] == LABEL]
    return list(label["data"])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same ID sets on every run and machine
    database=None,
    # no shrinking: each try is a job of seconds, and the drawn set that failed is reported as it is
    phases=[Phase.explicit, Phase.generate],
    # the fixtures are the daemons (module) and restore_logging, which undoes vfl-score's logging set-up
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@example(_realistic())
@given(data=holdings())
@pytest.mark.usefixtures("restore_logging")
def test_any_ids_align_serve_and_score_as_plain_python_says(service: _Service, pki: Pki, data: Holdings) -> None:
    run = service.run
    service.jobs += 1
    job_id = f"ids-{service.jobs}"
    _write_tables(service.data, data, stamp_ns=10**18 + service.jobs * 10**9)
    expected = data.intersection
    document = job_document(job_id, "splitnn", **JOB)
    document["distill"] = dict(DISTILL)
    with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
        jobs.submit(document)
        lines = finish_job(jobs, run, job_id)
    assert any(f"{len(expected)} common IDs (PSI)" in line for line in lines), lines

    # PSI: every party's aligned IDs, as written and as its saved alignment reloads them
    tables = {1: run.data / "party1.parquet", 2: run.data / "party2.csv", 3: run.data / "party3.csv"}
    digests = {party: ids_digest(read_party_csv(path).ids) for party, path in tables.items()}
    key = alignment_key(job_id, digests)
    for party in tables:
        folder = run.root / "runs" / job_id / f"party-{party}"
        assert _aligned_file(folder / "aligned_ids.csv") == expected, party
        saved = load_alignment(folder / "psi", key, digests[party])
        assert saved is not None and saved.tolist() == expected, party

    # federated inference by ID: gRPC and REST agree, and agree with the held-out predictions
    active = run.root / "runs" / job_id / "party-1"
    held_out = _predictions_file(active / "test_predictions.csv")
    assert held_out and set(held_out) <= set(expected)
    grpc_port, rest_port = run.serving_ports()
    with InferenceClient(f"127.0.0.1:{grpc_port}", tls=pki.caller_files("test-caller")) as client:
        by_grpc = client.infer(job_id, {IDS: np.array([i.encode() for i in expected], dtype=object)})[LABEL].tolist()
        outsider = data.outsider()
        with pytest.raises(TensorRejected, match="1 of the 2 IDs cannot be served") as refused:
            client.infer(job_id, {IDS: np.array([expected[0].encode(), outsider.encode()], dtype=object)})
        assert outsider not in str(refused.value)
    status, answer = _rest(pki, rest_port, job_id, expected)
    assert status == 200, answer
    assert _rest_labels(answer) == by_grpc
    assert {i: label for i, label in zip(expected, by_grpc, strict=True) if i in held_out} == held_out
    status, answer = _rest(pki, rest_port, job_id, [outsider, expected[-1]])
    assert status == 400 and "1 of the 2 IDs cannot be served" in json.dumps(answer), answer
    assert json.dumps(outsider)[1:-1] not in json.dumps(answer)

    # vfl-score: the student on party 1's Parquet file, IDs through unchanged, labels as its own file says
    scores = service.data.parent / f"scores-{service.jobs}"
    model = active / STUDENT_DIR / "model.onnx"
    code = score_cli.main(
        ["--model", str(model), "--input", str(tables[1]), "--output", str(scores), "--log-level", "warning"]
    )
    assert code == 0
    scored = pq.read_table(scores)
    assert scored.column("id").to_pylist() == list(data.held[0])
    student = dict(zip(scored.column("id").to_pylist(), scored.column(LABEL).to_pylist(), strict=True))
    student_held_out = _predictions_file(active / STUDENT_DIR / "test_predictions.csv")
    assert student_held_out and {i: student[i] for i in student_held_out} == student_held_out
