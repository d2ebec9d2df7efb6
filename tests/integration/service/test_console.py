"""The operator's console in a real browser: Chromium, driven by Playwright, with an operator certificate.

``vfl-server`` (with ``[console] enabled``) and two ``vfl-client`` daemons run as processes over
mTLS. The browser presents operator alice's certificate, as an operator's browser would, and:

- follows a job's page while the job runs PSI, trains and is served, without reloading it;
- sees party 3 go offline when its daemon is killed mid-training, with the job's status naming
  it, and come back online when it is started again, the job then finishing;
- is refused (403) with a party's certificate and with an inference caller's.

Every page is also scanned for the parties' IDs, feature values and anything printed like an
array (``vfltesting.leaks``), as the logs are. Each step saves a screenshot in the test's folder
(``tmp_path``; the job page in docs/how-to/console.md is one of them).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vflclient import JobClient
from vflcore.data.tables import read_party_csv
from vflcore.security.tls import TlsFiles
from vfltesting.datasets import write_vertical_split
from vfltesting.leaks import find_leaks, party_secrets
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, job_document, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

sync_api = pytest.importorskip("playwright.sync_api", reason="the console's tests need playwright (make venv)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "no Chromium on this host: the console's browser tests need Debian's chromium (.ci/run installs it)",
        allow_module_level=True,
    )

ROWS = 600
SERVER = {"party_timeout_s": 120, "heartbeat_timeout_s": 2}
CLIENT = {"heartbeat_s": 0.3}
#: Long enough that party 3 can be killed and restarted while the job trains.
EPOCHS = 40
#: The watched job's epochs: 3, not 6. Two points draw each chart's line (``svg.chart polyline``);
#: the page is opened before PSI ends, so every epoch still arrives live. ~0.45 CPU-s an epoch over
#: the three daemons; the file measured 0.5 CPU-s less (32.6 -> 32.1, paired runs, 2026-11-29).
WATCHED_EPOCHS = 3
#: How long a page may take to show what it should (it refreshes on events, at most once a second).
SHOWN_MS = 60_000


def _console_port(run: ServiceRun) -> int:
    return run.console_port(timeout_s=SHOWN_MS / 1000)


@pytest.fixture(scope="module")
def telltale(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three parties' CSVs whose IDs (e-mail-like, some non-ASCII) and features (100 to 1000, 7 significant
    digits) no page can show by chance, as ``test_log_secrets`` makes them for the logs."""
    out = tmp_path_factory.mktemp("telltale")
    rng = np.random.default_rng(11)
    features = rng.uniform(100, 1000, size=(ROWS, 9))
    labels = (features[:, 3] + features[:, 6] > 1100).astype(np.int64)
    columns = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    write_vertical_split(
        out, features=features, labels=labels, feature_names=[f"f{i}" for i in range(9)], party_columns=columns, seed=1
    )
    return out


@pytest.fixture(scope="module")
def service(pki: Pki, telltale: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceRun]:
    root = tmp_path_factory.mktemp("console")
    run = ServiceRun(
        root,
        pki,
        telltale,
        serving=True,
        server_settings=SERVER,
        client_settings=CLIENT,
        server_tables={"console": {"enabled": True, "listen": "127.0.0.1:0"}},
    )
    run.start_server()
    run.start_clients()
    try:
        yield run
    finally:
        run.close()


@pytest.fixture(scope="module")
def console(service: ServiceRun) -> str:
    return f"https://127.0.0.1:{_console_port(service)}"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def _context(browser: Any, console: str, files: TlsFiles) -> Any:
    """A browser profile presenting ``files``' certificate to the console (the CA is the project's own)."""
    certificate = {"origin": console, "certPath": str(files.cert), "keyPath": str(files.key)}
    return browser.new_context(client_certificates=[certificate], ignore_https_errors=True)


def _no_leaks(html: str, secrets: list[Any], where: str) -> None:
    leaks = find_leaks(html.splitlines(), secrets, where)
    assert not leaks, [str(leak) for leak in leaks[:5]]


@pytest.fixture(scope="module")
def secrets(telltale: Path) -> list[Any]:
    label = {1: "label"}
    return [party_secrets(p, read_party_csv(telltale / f"party{p}.csv", label_column=label.get(p))) for p in (1, 2, 3)]


class TestAnOperatorWatches:
    def test_the_job_page_follows_psi_training_and_serving(
        self, service: ServiceRun, console: str, chromium: Any, pki: Pki, secrets: list[Any], tmp_path: Path
    ) -> None:
        """Opened as soon as the job is submitted, the page shows each phase in turn, then the served model."""
        context = _context(chromium, console, pki.operator_files("alice"))
        page = context.new_page()
        with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
            jobs.submit(job_document("console-watch", "splitnn", epochs=WATCHED_EPOCHS))
            response = page.goto(f"{console}/jobs/console-watch")
            assert response is not None and response.status == 200
            headers = response.headers
            assert "script-src 'self'" in headers["content-security-policy"] and headers["cache-control"] == "no-store"
            page.screenshot(path=tmp_path / "job-started.png", full_page=True)
            page.locator("table.epochs").wait_for(timeout=SHOWN_MS)  # an epoch arrived without a reload
            page.screenshot(path=tmp_path / "job-training.png", full_page=True)
            page.locator("main .state.finished").first.wait_for(timeout=SHOWN_MS)
            page.get_by_text("serving", exact=True).wait_for(timeout=SHOWN_MS)
            page.screenshot(path=tmp_path / "job-finished.png", full_page=True)
        text = page.inner_text("main")
        for shown in ("aligning", "training", "finished", "Loss and metrics per epoch", "party 2", "party 3"):
            assert shown in text, shown
        assert page.locator("svg.chart polyline").count() >= 2
        assert page.locator("table.psi").count() == 0  # PSI's live figures are for a job that runs, not "0 of 1"
        _no_leaks(page.content(), secrets, "job page")
        for path in ("/", "/parties", "/server"):
            page.goto(console + path)
            page.screenshot(path=tmp_path / f"page{path.replace('/', '-') or '-jobs'}.png", full_page=True)
            _no_leaks(page.content(), secrets, path)
        assert "console (HTTPS)" in page.inner_text("main")  # the server page lists its listeners
        context.close()

    def test_a_killed_party_shows_offline_and_named_then_comes_back(
        self, service: ServiceRun, console: str, chromium: Any, pki: Pki, tmp_path: Path
    ) -> None:
        """kill -9 of party 3 mid-training: offline on the parties page, the job's status names it; back on restart."""
        context = _context(chromium, console, pki.operator_files("alice"))
        parties, job = context.new_page(), context.new_page()
        with JobClient(service.address, tls=pki.operator_files("alice")) as jobs:
            jobs.submit(job_document("console-kill", "splitnn", epochs=EPOCHS))
            wait_until(lambda: jobs.get("console-kill").epochs_done >= 1, "an epoch done", service, every_s=0.05)
            parties.goto(f"{console}/parties")
            job.goto(f"{console}/jobs/console-kill")
            row = parties.locator("tr", has_text="party 3")
            sync_api.expect(row.locator(".state")).to_have_text("online", timeout=SHOWN_MS)
            service.kill("party-3")
            sync_api.expect(row.locator(".state")).to_have_text("offline", timeout=SHOWN_MS)
            parties.screenshot(path=tmp_path / "party-offline.png", full_page=True)
            sync_api.expect(job.locator("#status")).to_contain_text("party 3", timeout=SHOWN_MS)
            assert job.locator("#error").count() == 0  # waiting is not an error: the message is the job's status
            job.screenshot(path=tmp_path / "job-waiting-for-party-3.png", full_page=True)
            service.start_client(3)
            sync_api.expect(row.locator(".state")).to_have_text("online", timeout=SHOWN_MS)
            parties.screenshot(path=tmp_path / "party-back.png", full_page=True)
            jobs.cancel("console-kill")  # what matters was seen; the rest of its epochs would only cost time
            ended = list(jobs.watch("console-kill"))[-1]  # the stream ends with the job
            assert ended.state in ("cancelled", "finished"), ended
        context.close()


class TestWhoMaySee:
    @pytest.mark.parametrize("who", ["party-2", "caller"])
    def test_a_party_or_caller_certificate_is_refused(self, who: str, console: str, chromium: Any, pki: Pki) -> None:
        """403 on every route, with what to use instead; the security headers on the refusal too."""
        files = pki.party_files(2) if who == "party-2" else pki.caller_files("test-caller")
        context = _context(chromium, console, files)
        page = context.new_page()
        for path in ("/", "/parties", "/jobs/console-watch", "/events/console-watch", "/console.js"):
            response = page.goto(console + path)
            assert response is not None and response.status == 403, path
            assert response.headers["cache-control"] == "no-store"
            assert "operator certificates only" in page.content()
        context.close()
