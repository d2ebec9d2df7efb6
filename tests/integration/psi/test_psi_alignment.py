"""Real PSI alignments over gRPC + mTLS: the server on port 0 with ``psi_only``, parties in threads.

Every test writes each party's CSV to ``tmp_path``, runs the whole alignment (Join, Align task,
PsiUpload / PsiDownload, digest cross-check, Finish) and compares what every party ends with to
plain Python set arithmetic. Sets stay far below ``vflcore.psi.blinding.SERIAL_BELOW``, so all
blinding runs in this process and a run takes well under a second.
"""

from __future__ import annotations

import csv
import hashlib
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog

from vflclient import JobAborted, PassiveParty, RunResult, read_party_csv
from vflclient.cli import main as client_main
from vflcore.psi.blinding import SERIAL_BELOW
from vflcore.runtime import daemon
from vflcore.runtime.config import ClientSettings
from vflserver.federation.alignment import EmptyIntersection
from vflserver.training.reports import RunSummary
from vfltesting.id_tables import customer_ids, intersection, write_party_csv
from vfltesting.in_process import RunningJob, play_parties, start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration

JOB_ID = "psi-job"


# ---- running one alignment -------------------------------------------------------------------


def first_row_of(ids: Sequence[str]) -> dict[str, int]:
    """Row number of each ID's first occurrence (what ``x`` holds for the row that is kept)."""
    rows: dict[str, int] = {}
    for n, value in enumerate(ids):
        rows.setdefault(value, n)
    return rows


@dataclass
class Outcome:
    """How one alignment ended, for the active party and for each passive party."""

    running: RunningJob
    runs: Path
    job_id: str
    passive: dict[int, PassiveParty]
    results: dict[int, RunResult | BaseException]
    summary: RunSummary | None = None
    error: BaseException | None = None
    inputs: dict[int, list[str]] = field(default_factory=dict)

    def aligned_ids_file(self, party: int) -> list[str]:
        with (self.runs / self.job_id / f"party-{party}" / "aligned_ids.csv").open(encoding="utf-8", newline="") as fh:
            header, *rows = list(csv.reader(fh))
        assert header == ["id"]
        return [row[0] for row in rows]


def run_alignment(
    pki: Pki,
    tmp_path: Path,
    parties: Mapping[int, Sequence[str]],
    *,
    job_id: str = JOB_ID,
    psi_only: bool = True,
    label: bool = True,
    psi_chunk_ids: int | None = None,
) -> Outcome:
    """Write ``parties`` (1 = active) as CSVs and run one job with real parties to its end.

    ``psi_chunk_ids``: the server's ``[psi] chunk_ids`` (None: its default, more than any set here).
    """
    assert max(map(len, parties.values())) < SERIAL_BELOW  # blinding stays in this process
    data = tmp_path / f"data-{sum(1 for _ in tmp_path.glob('data-*'))}"
    for party, ids in parties.items():
        write_party_csv(data / f"party{party}.csv", ids, label=label and party == 1)
    passive_ids = sorted(p for p in parties if p != 1)
    tables = {p: read_party_csv(data / f"party{p}.csv") for p in passive_ids}  # here, so tests see its logs
    job = replace(SMALL_JOB, job_id=job_id, passive_parties=tuple(passive_ids))
    chunking = {} if psi_chunk_ids is None else {"psi_chunk_ids": psi_chunk_ids}
    running = start_job(
        pki,
        data,
        tmp_path,
        job,
        join_timeout_s=30,
        label_column="label" if label else None,
        psi_only=psi_only,
        **chunking,
    )
    runs = tmp_path / "runs"
    passive = {p: PassiveParty(p, tables[p], ClientSettings(run_dir=runs)) for p in passive_ids}
    wait = play_parties(running, pki, passive)
    try:
        running.thread.join(60)
        results = wait(60)
        assert not running.thread.is_alive(), "the active party did not finish in time"
    finally:
        if running.thread.is_alive():
            running.active.stop_event.set()
            running.active.parties.abort(RuntimeError("test over"))
        running.server.stop(grace=None)
    outcome = Outcome(running, runs, job_id, passive, results, inputs={p: list(ids) for p, ids in parties.items()})
    outcome.summary = running.outcome.get("summary")
    outcome.error = running.outcome.get("error")
    return outcome


def assert_aligned(outcome: Outcome, expected: list[str]) -> None:
    """Every party succeeded and holds ``expected``, in that order, with each ID's own row."""
    assert outcome.error is None, repr(outcome.error)
    assert outcome.summary is not None and outcome.summary.alignment is not None
    for party, result in outcome.results.items():
        assert isinstance(result, RunResult) and result.success, (party, result)
    tables = {1: outcome.summary.alignment.table} | {p: pp.table for p, pp in outcome.passive.items()}
    for party, table in tables.items():
        assert table is not None, party
        assert table.ids.tolist() == expected, party
        rows = first_row_of(outcome.inputs[party])
        assert table.features[:, 0].tolist() == [float(rows[i]) for i in expected], party
        assert outcome.aligned_ids_file(party) == expected, party


def pairwise_sizes(parties: Mapping[int, Sequence[str]]) -> dict[int, int]:
    active = set(parties[1])
    return {p: len(active & set(ids)) for p, ids in parties.items() if p != 1}


# ---- the tests -------------------------------------------------------------------------------


class TestIntersection:
    def test_partial_overlap_of_random_sets(self, pki: Pki, tmp_path: Path) -> None:
        """Random sets with partial overlap align to exactly their sorted set intersection."""
        rng = random.Random(20240601)
        universe = range(2_000)
        parties = {p: customer_ids(rng.sample(universe, k)) for p, k in ((1, 700), (2, 600), (3, 500))}
        expected = sorted(intersection(parties))
        assert 0 < len(expected) < 500  # a real partial overlap
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, expected)
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == pairwise_sizes(parties)
        assert not outcome.summary.alignment.reused

    def test_full_overlap(self, pki: Pki, tmp_path: Path) -> None:
        """Identical ID sets, listed in different orders, align to all IDs in sorted order."""
        ids = customer_ids(range(400))
        parties = {p: random.Random(p).sample(ids, len(ids)) for p in (1, 2, 3)}
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, sorted(ids))
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == {2: 400, 3: 400}

    def test_single_common_element(self, pki: Pki, tmp_path: Path) -> None:
        """Sets that share exactly one ID align to that one row on every party."""
        parties = {
            1: customer_ids([1, 2, 3, 99]),
            2: customer_ids([99, 4, 5]),
            3: customer_ids([6, 99, 7, 8]),
        }
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, ["customer-000099"])
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == {2: 1, 3: 1}

    def test_three_passive_parties(self, pki: Pki, tmp_path: Path) -> None:
        """With parties 2, 3 and 4 the result is the four-way intersection; pairwise counts are per party."""
        rng = random.Random(7)
        parties = {p: customer_ids(rng.sample(range(800), 500)) for p in (1, 2, 3, 4)}
        expected = sorted(intersection(parties))
        sizes = pairwise_sizes(parties)
        assert 0 < len(expected) < min(sizes.values())  # the active party learns more than ∩
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, expected)
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == sizes
        assert set(outcome.results) == {2, 3, 4}

    def test_duplicate_ids_are_dropped_with_a_warning(self, pki: Pki, tmp_path: Path) -> None:
        """A party's repeated IDs keep their first row, are counted in a warning, and align once."""
        party2 = customer_ids([5, 1, 5, 2, 9, 1, 5, 3])
        parties = {1: customer_ids([1, 2, 3, 4, 5]), 2: party2, 3: customer_ids([5, 3, 2, 1])}
        with structlog.testing.capture_logs() as logs:
            outcome = run_alignment(pki, tmp_path, parties)
        (warning,) = [e for e in logs if e["event"] == "duplicate_ids_dropped"]
        assert warning["file"].endswith("party2.csv")
        assert warning["duplicated_ids"] == 2 and warning["rows_dropped"] == 3
        expected = customer_ids([1, 2, 3, 5])
        assert_aligned(outcome, expected)  # also checks that each ID kept its first row's features
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == {2: 4, 3: 4}

    def test_unicode_ids(self, pki: Pki, tmp_path: Path) -> None:
        """Non-ASCII IDs match byte for byte: composed "Zoë" is not decomposed "Zoë", nor "zoë"."""
        composed, decomposed = "Zo\u00eb", "Zoe\u0308"
        shared = [composed, "東京", "🦊 fox", "Ωmega-Ω", 'comma, "quoted"']
        parties = {
            1: [*shared, decomposed, "naïve-ß", "only-active-é"],
            2: ["zoë", *reversed(shared), "naïve-ß", "only-2-ü"],
            3: ["東京都", decomposed, *shared, "only-3-😀"],
        }
        expected = sorted(shared)
        assert sorted(intersection(parties)) == expected
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, expected)
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == {2: 6, 3: 6}

    def test_integer_like_ids_are_strings(self, pki: Pki, tmp_path: Path) -> None:
        """Integer-like IDs match as written: "7" meets "7" but not "07" or "007"."""
        parties = {
            1: ["7", "42", "07", "100", "0"],
            2: ["007", "7", "42", "0042", "0", "1e2"],
            3: ["0", "42", "07", "7", "7.0"],
        }
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, ["0", "42", "7"])
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.pairwise == {2: 3, 3: 4}

    def test_active_party_without_label_column(self, pki: Pki, tmp_path: Path) -> None:
        """With psi_only the active party's CSV needs only its ID column (here plus one feature)."""
        parties = {1: customer_ids([1, 2, 3]), 2: customer_ids([2, 3, 4]), 3: customer_ids([3, 2])}
        outcome = run_alignment(pki, tmp_path, parties, label=False)
        assert_aligned(outcome, customer_ids([2, 3]))
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert outcome.summary.alignment.table.labels is None


class TestChunks:
    @pytest.mark.parametrize("chunk_ids", [7, 64])
    def test_chunked_equals_one_chunk(self, chunk_ids: int, pki: Pki, tmp_path: Path) -> None:
        """Chunks that divide no party's ID count: the same aligned IDs, same order, same overlaps as one chunk."""
        rng = random.Random(chunk_ids)
        # A quarter of the sets this had (601, 449, 523 of 900): still 2 to 22 chunks a stream, and
        # the 7-ID case, one round trip a chunk, fell from ~8 s to ~2 s on 2 cores (2026-11-29).
        parties = {p: customer_ids(rng.sample(range(225), k)) for p, k in ((1, 151), (2, 113), (3, 131))}
        assert all(len(ids) % chunk_ids for ids in parties.values())
        expected = sorted(intersection(parties))
        whole = run_alignment(pki, tmp_path / "whole", parties, psi_chunk_ids=1_000)
        chunked = run_alignment(pki, tmp_path / "chunked", parties, psi_chunk_ids=chunk_ids)
        for outcome in (whole, chunked):
            assert_aligned(outcome, expected)
        assert whole.summary is not None and whole.summary.alignment is not None
        assert chunked.summary is not None and chunked.summary.alignment is not None
        assert chunked.summary.alignment.table.ids.tolist() == whole.summary.alignment.table.ids.tolist()
        assert chunked.summary.alignment.pairwise == whole.summary.alignment.pairwise == pairwise_sizes(parties)

    def test_one_short_chunk_next_to_many(self, pki: Pki, tmp_path: Path) -> None:
        """A party whose whole set is one short chunk, next to parties of many chunks: every stream ends, and aligns."""
        parties = {1: customer_ids(range(0, 90)), 2: customer_ids(range(40, 41)), 3: customer_ids(range(30, 130))}
        outcome = run_alignment(pki, tmp_path, parties, psi_chunk_ids=3)
        assert_aligned(outcome, ["customer-000040"])


class TestEmptyIntersection:
    @pytest.mark.parametrize(
        ("psi_only", "numbers"),
        [
            (True, {1: range(0, 300), 2: range(300, 550), 3: range(550, 800)}),  # disjoint sets
            (False, {1: range(0, 300), 2: range(0, 150), 3: range(150, 400)}),  # pairwise overlaps only
        ],
        ids=["disjoint-psi-only", "no-common-id-training-job"],
    )
    def test_no_shared_id_stops_the_job_before_training(
        self, pki: Pki, tmp_path: Path, psi_only: bool, numbers: dict[int, range]
    ) -> None:
        """No ID common to all parties fails the job with EmptyIntersection; every party ends in error."""
        parties = {p: customer_ids(random.Random(p).sample(n, len(n))) for p, n in numbers.items()}
        assert intersection(parties) == set()
        outcome = run_alignment(pki, tmp_path, parties, psi_only=psi_only)
        assert isinstance(outcome.error, EmptyIntersection), repr(outcome.error)
        assert "share no sample ID" in str(outcome.error)
        assert str(pairwise_sizes(parties)) in str(outcome.error)  # e.g. {2: 0, 3: 0}
        assert outcome.summary is None
        for party, result in outcome.results.items():
            assert isinstance(result, JobAborted), (party, result)
            assert "share no sample ID" in str(result), (party, result)
            assert outcome.passive[party].table is None and outcome.passive[party].algorithm is None
        assert outcome.running.active.parties.state == "failed"
        assert getattr(outcome.running.active, "algorithm", None) is None  # training never set up
        assert list(outcome.runs.rglob("epoch-*.pt")) == []
        assert list(outcome.runs.rglob("aligned_ids.csv")) == []


class TestReuse:
    def test_second_run_reuses_and_changed_data_runs_psi_again(self, pki: Pki, tmp_path: Path) -> None:
        """Same job and data: the saved alignment is reused; one ID more on party 3: PSI runs again."""
        rng = random.Random(11)
        parties = {p: customer_ids(rng.sample(range(600), 300)) for p in (1, 2, 3)}
        expected = sorted(intersection(parties))

        first = run_alignment(pki, tmp_path, parties)
        assert_aligned(first, expected)
        assert first.summary is not None and first.summary.alignment is not None
        assert not first.summary.alignment.reused

        second = run_alignment(pki, tmp_path, parties)
        assert_aligned(second, expected)
        assert second.summary is not None and second.summary.alignment is not None
        assert second.summary.alignment.reused
        assert second.summary.alignment.pairwise == pairwise_sizes(parties)  # kept with the alignment

        common = sorted(set(parties[1]) & set(parties[2]) - set(parties[3]))[0]  # in A and B only
        changed = {**parties, 3: [*parties[3], common]}
        third = run_alignment(pki, tmp_path, changed)
        assert_aligned(third, sorted([*expected, common]))
        assert third.summary is not None and third.summary.alignment is not None
        assert not third.summary.alignment.reused
        assert third.summary.alignment.pairwise == pairwise_sizes(changed)

    def test_removed_id_runs_psi_again(self, pki: Pki, tmp_path: Path) -> None:
        """Removing one ID from party 2 after a run changes the key: no reuse, and the ID is gone."""
        parties = {p: customer_ids(range(50)) for p in (1, 2, 3)}
        assert_aligned(run_alignment(pki, tmp_path, parties), customer_ids(range(50)))
        changed = {**parties, 2: customer_ids(range(1, 50))}
        again = run_alignment(pki, tmp_path, changed)
        assert_aligned(again, customer_ids(range(1, 50)))
        assert again.summary is not None and again.summary.alignment is not None
        assert not again.summary.alignment.reused


# ---- what crosses the wire -------------------------------------------------------------------


class _ClientRecorder(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Keeps the serialized bytes of every request message a channel sends."""

    def __init__(self, sink: list[bytes]) -> None:
        self.sink = sink

    def _tee(self, requests: Iterator[Any]) -> Iterator[Any]:
        for request in requests:
            self.sink.append(request.SerializeToString())
            yield request

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self.sink.append(request.SerializeToString())
        return continuation(details, request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        self.sink.append(request.SerializeToString())
        return continuation(details, request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Iterator[Any]) -> Any:
        return continuation(details, self._tee(requests))

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Iterator[Any]) -> Any:
        return continuation(details, self._tee(requests))


class _ServerRecorder(grpc.ServerInterceptor):
    """Keeps the serialized bytes of every response message the server sends."""

    def __init__(self, sink: list[bytes]) -> None:
        self.sink = sink

    def _tee(self, responses: Iterator[Any]) -> Iterator[Any]:
        for response in responses:
            self.sink.append(response.SerializeToString())
            yield response

    def _one(self, response: Any) -> Any:
        self.sink.append(response.SerializeToString())
        return response

    def intercept_service(self, continuation: Any, handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        codec = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            inner_uu = handler.unary_unary
            return grpc.unary_unary_rpc_method_handler(lambda r, c: self._one(inner_uu(r, c)), **codec)
        if handler.unary_stream:
            inner_us = handler.unary_stream
            return grpc.unary_stream_rpc_method_handler(lambda r, c: self._tee(inner_us(r, c)), **codec)
        if handler.stream_unary:
            inner_su = handler.stream_unary
            return grpc.stream_unary_rpc_method_handler(lambda r, c: self._one(inner_su(r, c)), **codec)
        inner_ss = handler.stream_stream
        return grpc.stream_stream_rpc_method_handler(lambda r, c: self._tee(inner_ss(r, c)), **codec)


@dataclass
class WireCapture:
    """Serialized messages, per direction, of every call made while the fixture is active."""

    from_parties: list[bytes] = field(default_factory=list)
    from_server: list[bytes] = field(default_factory=list)


@pytest.fixture
def wire_capture(monkeypatch: pytest.MonkeyPatch) -> WireCapture:
    """Intercept every channel ``Connection`` opens and every server ``build_server`` makes."""
    capture = WireCapture()
    secure_channel: Callable[..., grpc.Channel] = grpc.secure_channel
    server: Callable[..., grpc.Server] = grpc.server

    def recording_channel(*args: Any, **kwargs: Any) -> grpc.Channel:
        return grpc.intercept_channel(secure_channel(*args, **kwargs), _ClientRecorder(capture.from_parties))

    def recording_server(*args: Any, **kwargs: Any) -> grpc.Server:
        interceptors = [*kwargs.pop("interceptors", ()), _ServerRecorder(capture.from_server)]
        return server(*args, interceptors=interceptors, **kwargs)

    monkeypatch.setattr(grpc, "secure_channel", recording_channel)
    monkeypatch.setattr(grpc, "server", recording_server)
    return capture


def forbidden_forms(value: str) -> dict[bytes, str]:
    """The ID's UTF-8 bytes and its SHA-256 / SHA-512 digests, raw and hex."""
    raw = value.encode("utf-8")
    forms = {raw: "raw"}
    for name in ("sha256", "sha512"):
        digest = hashlib.new(name, raw).digest()
        forms[digest] = name
        forms[digest.hex().encode()] = f"{name} hex"
    return forms


class TestWire:
    def test_no_id_or_id_digest_crosses_the_wire(self, pki: Pki, tmp_path: Path, wire_capture: WireCapture) -> None:
        """No raw ID and no SHA-256/SHA-512 of an ID, shared or not, is in any byte sent either way."""
        rng = random.Random(5)
        parties = {p: customer_ids(rng.sample(range(900), 400)) for p in (1, 2, 3)}
        expected = sorted(intersection(parties))
        outside = set().union(*map(set, parties.values())) - set(expected)
        assert expected and outside
        outcome = run_alignment(pki, tmp_path, parties)
        assert_aligned(outcome, expected)
        assert outcome.summary is not None and outcome.summary.alignment is not None
        assert not outcome.summary.alignment.reused  # PSI really ran, blinded values really travelled

        sent = {"parties -> server": wire_capture.from_parties, "server -> parties": wire_capture.from_server}
        # The capture is real: both directions carry the PSI payload and the job id in tensor keys.
        blinded_up = 32 * (len(parties[2]) + len(parties[3])) + 12 * 2 * len(parties[1])
        assert sum(map(len, wire_capture.from_parties)) >= blinded_up
        assert sum(map(len, wire_capture.from_server)) >= 32 * 2 * len(parties[1])
        for direction, messages in sent.items():
            assert any(JOB_ID.encode() in m for m in messages), direction

        needles: dict[bytes, str] = {}
        for value in sorted(set(expected) | outside):
            needles |= {form: f"{kind} of {value!r}" for form, kind in forbidden_forms(value).items()}
        assert all(len(n) >= 15 for n in needles)  # long enough that a chance match is impossible
        for direction, messages in sent.items():
            leaks = [what for message in messages for needle, what in needles.items() if needle in message]
            assert leaks == [], f"{direction}: {leaks[:5]}"


# ---- bad input -------------------------------------------------------------------------------


class TestBadInput:
    def test_missing_configured_id_column(
        self, pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
    ) -> None:
        """vfl-client with --id-column customer_id on a CSV without it exits with a config error naming both."""
        data = write_party_csv(tmp_path / "party2.csv", customer_ids([1, 2]), id_column="id")
        files = pki.party_files(2)
        argv = ["--party", "2", "--server", "127.0.0.1:1", "--data", str(data), "--id-column", "customer_id"]
        argv += ["--ca", str(files.ca), "--cert", str(files.cert), "--key", str(files.key), "--log-format", "json"]
        assert client_main(argv) == daemon.EXIT_CONFIG
        err = capsys.readouterr().err
        assert str(data) in err and "ID column 'customer_id' not found" in err, err
        assert "columns found: ['id', 'x']" in err
