"""Parties on different X25519 paths align the same IDs, and each daemon says which path it took.

``vfl-server`` runs ``[psi] x25519 = "openssl"`` and both passive daemons ``"auto"`` (Intel's
multi-buffer X25519 where it loads and the CPU has AVX-512 IFMA, as on CI's machine; OpenSSL's
elsewhere). A PSI-only job over mTLS must give every party the aligned IDs the data holds, and
each daemon's log its ``psi_x25519`` line. A value the daemons do not know exits 2, naming the key.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from vflclient import JobClient
from vflclient.cli import main as client_main
from vflcore.psi.x25519 import choose
from vflcore.runtime import daemon
from vfltesting.pki import Pki
from vfltesting.service import ServiceRun, finish_job, job_document, log_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _ids(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as fh:
        return [row[0] for row in list(csv.reader(fh))[1:]]


def test_a_mixed_pair_aligns_the_ids_the_data_holds(pki: Pki, digits_data: Path, tmp_path: Path) -> None:
    run = ServiceRun(
        tmp_path,
        pki,
        digits_data,
        serving=False,
        server_tables={"psi": {"x25519": "openssl"}},
        client_tables={"psi": {"x25519": "auto"}},
    )
    job_id = "psi-mixed-x25519"
    try:
        run.start_server()
        run.start_clients()
        with JobClient(run.address, tls=run.pki.operator_files("alice")) as jobs:
            jobs.submit(job_document(job_id, "splitnn", psi_only=True))
            finish_job(jobs, run, job_id)
    finally:
        run.close()
    expected_client = choose("auto").name
    for name, chosen in (("server", "openssl"), ("party-2", expected_client), ("party-3", expected_client)):
        [line] = log_events(run.logs[name], "psi_x25519")
        assert line["chosen"] == chosen and line["reason"], line
    common = set.intersection(*(set(_ids(digits_data / f"party{p}.csv")) for p in (1, 2, 3)))
    expected = sorted(common, key=lambda value: value.encode("utf-8"))
    for party in (1, 2, 3):
        assert _ids(tmp_path / "runs" / job_id / f"party-{party}" / "aligned_ids.csv") == expected, party


@pytest.mark.usefixtures("restore_logging")
def test_an_unknown_value_exits_2_naming_the_key(
    pki: Pki, digits_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vfl-client through its entry point (``main``, in this process, as test_client_check runs it): exit 2.

    Not the console script exec'd: ~6 CPU-s of start-up for a config check; an exec'd start's
    exit codes are test_signals' and test_server_cli's subject.
    """
    files = pki.party_files(2)
    config = tmp_path / "party2.toml"
    config.write_text(
        f'[client]\nserver = "127.0.0.1:1"\nparty = 2\n[tls]\nca = "{files.ca}"\ncert = "{files.cert}"\n'
        f'key = "{files.key}"\n[data]\npath = "{digits_data / "party2.csv"}"\nid_column = "id"\n'
        '[psi]\nx25519 = "fastest"\n'
    )
    code = client_main(["--config", str(config)])
    err = capsys.readouterr().err
    assert code == daemon.EXIT_CONFIG == 2, err
    assert "[psi] x25519 = 'fastest'" in err and "'multibuffer'" in err, err
