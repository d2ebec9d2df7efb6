"""The console's pages, rendered from records made by hand: escaped, path-free, no numbers that read like a tensor.

The browser tests (``tests/integration/service/test_console.py``) drive the real thing; these pin what
each page may hold, on inputs chosen to be hostile: a job id and messages with markup, paths
outside the run folder, many epochs of losses.
"""

from __future__ import annotations

import math
from pathlib import Path

from vflserver.console import facts, pages
from vflserver.console.charts import line_chart
from vflserver.console.facts import JobFacts, PartyFacts, Phase, ServerFacts, phases, redact_paths
from vflserver.console.server import SECURITY_HEADERS, refusal
from vflserver.federation.board import JobBoard
from vflserver.jobs.store import EpochRecord, JobEvent, JobRecord, JobStore
from vfltesting.leaks import find_leaks
from vfltesting.pki import issue_pki

HOSTILE = 'job-<script>alert("x")</script>-ünïcødé'


def _record(**changes: object) -> JobRecord:
    values: dict[str, object] = {
        "job_id": HOSTILE,
        "document": {"job": {"passive_parties": [2, 3]}, "privacy": {"label_defence": "marvell"}},
        "algorithm": "splitnn",
        "epochs": 30,
        "state": "training",
        "submitter": "alice",
        "submitted_at": 1_800_000_000.0,
        "started_at": 1_800_000_010.0,
        "ended_at": None,
        "error": "",
        "epochs_done": 30,
        "final_metrics": {},
        "served": False,
    }
    values.update(changes)
    return JobRecord(**values)  # type: ignore[arg-type]


def _epochs(count: int) -> list[EpochRecord]:
    return [
        EpochRecord(
            e, 0.693147 / (e + 1), 0.712345 / (e + 1), {"accuracy": 0.5 + e / 100, "auc": 0.61 + e / 99}, 1.5, 1 << 20
        )
        for e in range(count)
    ]


def _facts(**changes: object) -> JobFacts:
    record = _record(**changes)
    events = [
        JobEvent(record.job_id, 1, 1_800_000_000.0, "state", "queued", "queued", None, {}),
        JobEvent(record.job_id, 2, 1_800_000_010.0, "state", "aligning", "PSI <b>started</b>", None, {}),
        JobEvent(record.job_id, 3, 1_800_000_040.0, "state", "training", "training", None, {}),
    ]
    return JobFacts(
        record=record,
        events=events,
        epochs=_epochs(30),
        phases=phases(events, record),
        error="",
        privacy={"label_defence": "marvell", "label_dp": {"epsilon": 1.0, "flipped": 12}},
        wire_bytes={"2": {"training": 123456, "PSI": 42}, "3": {"training": 654321}},
        served=[(record.job_id, "serving")],
    )


def submit_job(store: JobStore, job_id: str, to: str) -> None:
    """``job_id`` submitted to ``store`` and moved through aligning to ``to`` (training or waiting)."""
    document = {"job": {"job_id": job_id, "passive_parties": [2, 3]}}
    store.submit(job_id, document, algorithm="splitnn", epochs=3, submitter="alice")
    store.set_state(job_id, "aligning", "waiting for parties [2, 3], then PSI")
    store.set_state(job_id, "training", "600 common IDs (PSI)")
    if to != "training":
        store.set_state(job_id, to, "")


def _sources(tmp_path: Path) -> facts.Sources:
    store = JobStore(tmp_path / "jobs.sqlite")
    return facts.Sources(store, JobBoard(), None, tmp_path, "0.1.0", 0.0, dict)


class TestPages:
    def test_every_value_is_escaped(self) -> None:
        html = pages.job_page(_facts())
        assert "<script>alert" not in html and "&lt;script&gt;" in html
        assert "<b>started</b>" not in html
        assert html.count("<script") == 1  # the one script, from /console.js

    def test_a_job_page_with_thirty_epochs_prints_no_run_of_numbers(self) -> None:
        """Losses in table cells and charts in whole pixels: nothing the log guard would take for a tensor."""
        html = pages.job_page(_facts())
        assert find_leaks(html.splitlines(), [], "job page") == []
        assert "polyline" in html

    def test_a_waiting_jobs_message_is_its_status_not_an_error(self) -> None:
        """The latest state's message is shown beside the state; "Last error" is for a failed or stopped job."""
        html = pages.job_page(_facts(state="waiting", error=""))
        assert 'id="error"' not in html and 'id="status"' not in html  # the facts decide what is shown
        facts = _facts()
        waiting = JobFacts(**{**facts.__dict__, "status": "waiting for party 3: its daemon stopped answering"})
        html = pages.job_page(waiting)
        assert 'id="status">waiting for party 3' in html and "Last error" not in html
        failed = JobFacts(**{**facts.__dict__, "error": "party 3 did not come back within 120 s"})
        assert 'id="error">party 3 did not come back' in pages.job_page(failed)

    def test_the_status_and_error_come_from_the_store(self, tmp_path: Path) -> None:
        """A waiting job's message is its status; a failed job's is its error, and no status."""
        sources = _sources(tmp_path)
        try:
            submit_job(sources.store, "w", "training")
            sources.store.set_state("w", "waiting", "party 3 is offline; waiting up to 120 s for it")
            waiting = facts.job(sources, "w")
            assert (waiting.status, waiting.error) == ("party 3 is offline; waiting up to 120 s for it", "")
            sources.store.set_state("w", "failed", "party 3 did not come back")
            failed = facts.job(sources, "w")
            assert (failed.status, failed.error) == ("", "party 3 did not come back")
        finally:
            sources.store.close()

    def test_a_crash_outage_is_not_training_time(self, tmp_path: Path) -> None:
        """Jobs a dead server left training are interrupted as of their last event: the outage is not training."""
        path = tmp_path / "jobs.sqlite"
        first = JobStore(path)
        submit_job(first, "c", "training")
        first.record_epoch("c", _epochs(1)[0])
        first.close()  # the server dies: nothing more is written
        second = JobStore(path)
        try:
            second.recover()
            second.requeue_interrupted()
            events = second.events("c")
            spent = {p.state: p.seconds for p in phases(events, second.get("c"))}
            [training] = [e for e in events if e.kind == "state" and e.state == "training"]
            [epoch] = [e for e in events if e.kind == "epoch"]
            assert spent["training"] == epoch.at - training.at  # not up to the restart
        finally:
            second.close()

    def test_parties_and_server_pages(self) -> None:
        rows = [PartyFacts(2, True, 0.4, "0.1.0", 364.6, ["j"]), PartyFacts(3, False, 125.0, "", None, [])]
        html = pages.parties_page(rows)
        assert "online" in html and "offline" in html and "365 days" in html and "2 min ago" in html
        server = pages.server_page(
            ServerFacts("0.1.0", 4000.0, {"console (HTTPS)": "127.0.0.1:8443"}, 5 << 20, 9 << 30, None)
        )
        assert "67 min" in server and "console (HTTPS)" in server
        assert "off ([metrics] enabled = false)" in server

    def test_phases_add_up_each_state(self) -> None:
        record = _record(ended_at=1_800_000_100.0, state="finished")
        events = [
            JobEvent("j", 1, 1_800_000_000.0, "state", "aligning", "", None, {}),
            JobEvent("j", 2, 1_800_000_010.0, "state", "training", "", None, {}),
            JobEvent("j", 3, 1_800_000_030.0, "epoch", "training", "", _epochs(1)[0], {}),
            JobEvent("j", 4, 1_800_000_050.0, "state", "waiting", "", None, {}),
            JobEvent("j", 5, 1_800_000_060.0, "state", "training", "", None, {}),
            JobEvent("j", 6, 1_800_000_100.0, "state", "finished", "", None, {}),
        ]
        assert phases(events, record) == [
            Phase("aligning", 10.0),
            Phase("training", 80.0),
            Phase("waiting", 10.0),
            Phase("finished", 0.0),
        ]


class TestPaths:
    def test_paths_outside_the_run_folder_are_cut_to_their_last_part(self, tmp_path: Path) -> None:
        runs = tmp_path / "runs"
        runs.mkdir()
        message = f"party1.csv at /srv/bank/customers/party1.csv: no column 'x'; see {runs}/j/party-1/summary.json"
        shown = redact_paths(message, runs)
        assert "/srv/bank" not in shown and "…/party1.csv" in shown
        assert f"{runs.resolve()}/j/party-1/summary.json" in shown


class TestCharts:
    def test_whole_pixels_and_nan_skipped(self) -> None:
        svg = line_chart("loss", {"train": [0.5, math.nan, 0.25, 0.125]})
        points = svg.split('points="')[1].split('"')[0]
        assert all(part.replace(",", "").isdigit() for part in points.split())
        assert len(points.split()) == 3

    def test_nothing_to_draw_says_so(self) -> None:
        assert "nothing yet" in line_chart("loss", {"train": [math.nan]})


class TestAccess:
    def test_only_operator_certificates_pass(self, tmp_path: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import Encoding

        pki = issue_pki(tmp_path, (2,), callers=("caller-1",))

        def der(path: Path) -> bytes:
            return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(Encoding.DER)

        assert refusal(der(pki.operator_files("alice").cert)) is None
        assert "operator certificates only" in str(refusal(der(pki.party_files(2).cert)))
        assert "operator certificates only" in str(refusal(der(pki.caller_files("caller-1").cert)))
        assert refusal(None) is not None

    def test_the_policy_allows_no_inline_code(self) -> None:
        policy = SECURITY_HEADERS["Content-Security-Policy"]
        assert "'unsafe-inline'" not in policy and "default-src 'none'" in policy
        assert SECURITY_HEADERS["Cache-Control"] == "no-store"
