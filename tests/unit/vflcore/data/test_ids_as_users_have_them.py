"""IDs as users have them, through every in-process path, against a plain-Python oracle (issue 36).

Hypothesis draws ID sets like a bank's: e-mail-like IDs sharing a long domain, uuid4 strings,
64-hex digests, numeric strings with leading zeros, non-ASCII text, IDs with commas, quotes and
spaces (leading and trailing too), 1 to 256 bytes of UTF-8. Each set goes through the paths a
party's IDs take in this process, and each answer is compared with what sets, ``sorted`` and
dicts of ``str`` give:

- read: a CSV written by the csv module (quoted as needed) and a Parquet file, by both readers;
- PSI with the real curve arithmetic, three parties, each uploading in its secret order; the
  aligned order; every party's aligned list and its digest; the saved alignment reloaded, and
  a passive party's table put into that order from it;
- scoring by ID (``AlignedPredictor.rows_of``), the IDs arriving as KServe BYTES elements;
- ``aligned_ids.csv`` and ``test_predictions.csv``, read back with the csv module.

The gRPC and REST endpoints and ``vfl-score`` are exercised by the integration suite.
"""

from __future__ import annotations

import csv
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vflalgorithms.contexts import ActiveContext
from vflalgorithms.registry import algorithm_spec
from vflcore.data.exact_scan import read_exactly
from vflcore.data.id_arrays import MAX_ID_BYTES, STRING_IDS, sort_order
from vflcore.data.tables import aligned_digest, ids_digest, read_party_csv, select_rows, take_rows, write_aligned_ids
from vflcore.errors import InferenceInputError
from vflcore.job.spec import JobSpec
from vflcore.psi import BlindingKey, blind, hash_and_blind, make_dst
from vflcore.psi.cache import alignment_key, load_alignment, save_alignment
from vflcore.psi.chunks import id_bytes
from vflcore.psi.intersection import align_matches, is_strictly_increasing
from vflcore.psi.matching import match, truncate
from vflcore.psi.order import UploadOrder
from vflcore.wire.oip import array_from_values, decode_bytes_elements, encode_bytes_elements
from vflserver.federation.passive_parties import PassiveParties
from vflserver.inference.federated import as_text
from vflserver.training.aligned_predictions import AlignedPredictor
from vflserver.training.reports import write_predictions

JOB = "ids-as-users-have-them"
DOMAIN = "@retail-banking.customers.example-group.co.uk"  # 46 bytes every e-mail ID shares

#: Text with no control character (the readers refuse those) and no lone surrogate (not UTF-8).
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=80)
E_MAIL = st.builds(
    lambda name, n: f"{name}.{n:06d}{DOMAIN}", st.from_regex(r"[a-z]{1,12}", fullmatch=True), st.integers(0, 10**6)
)
UUID4 = st.builds(lambda bits: str(uuid.UUID(int=bits, version=4)), st.integers(0, 2**128 - 1))
HEX64 = st.builds(lambda bits: f"{bits:064x}", st.integers(0, 2**256 - 1))
ZEROS = st.builds(lambda zeros, n: "0" * zeros + str(n), st.integers(0, 6), st.integers(0, 10**4))
NON_ASCII = st.builds(
    lambda word, n: f"ВИНО-{n}-{word}",
    st.sampled_from(["ünïcødé", "東京", "🦊", "Zoë", "Zoe\u0308"]),
    st.integers(0, 99),
)
#: Quotes, commas and spaces anywhere: a leading quote with no comma is the case a writer that
#: quotes only commas gets wrong.
CSV_TRAPS = st.builds(
    lambda head, n, tail: f"{head}{n}{tail}",
    st.sampled_from(["", " ", '"', "a,", '"q" ', "x "]),
    st.integers(0, 99),
    st.sampled_from(["", " ", ",b", '"', ' "x"', ", "]),
)
LONGEST = st.builds(lambda n: f"{n:08d}" + "é" * 124, st.integers(0, 10**8 - 1))  # 256 bytes exactly
ONE_ID = st.one_of(E_MAIL, UUID4, HEX64, ZEROS, NON_ASCII, CSV_TRAPS, LONGEST, TEXT).filter(
    lambda s: 0 < len(s.encode()) <= MAX_ID_BYTES and s.strip() != ""
)
ID_SETS = st.lists(ONE_ID, min_size=1, max_size=40, unique=True)
#: Which of the three parties holds each ID (bit 0: the active party, 1 and 2: the passive ones);
#: every party, half the time, so that most drawn IDs reach the aligned paths.
HOLDERS = st.one_of(st.just(7), st.integers(1, 7))


def _write_csv(path: Path, ids: list[str]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "a"])
        writer.writerows([value, float(n)] for n, value in enumerate(ids))
    return path


def _csv_column(path: Path, column: int = 0) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [row[column] for row in list(csv.reader(handle))[1:]]


def _psi(tables: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """ECDH-PSI as the service runs it, in process: every party's rows of the common IDs, in the agreed order.

    Each party hashes its IDs' UTF-8 bytes (``psi.chunks.id_bytes``) to the curve in its own secret
    upload order; the active party (1) matches the doubly blinded values pair by pair, finds the
    aligned order (``align_matches`` with ``sort_order``, as the service does) and tells each
    passive party its upload positions.
    """
    dst = make_dst(JOB)
    keys = {party: BlindingKey.generate() for party in tables}
    orders = {party: UploadOrder(len(ids), UploadOrder.new_key()) for party, ids in tables.items()}
    uploads = {
        party: hash_and_blind(id_bytes(ids, orders[party].span(0, len(ids))), dst, keys[party])
        for party, ids in tables.items()
    }
    twice = lambda points, key: truncate(np.frombuffer(b"".join(blind(points, key)), np.uint8).reshape(-1, 32))  # noqa: E731
    matches = {}
    for party in (2, 3):
        mine = twice(uploads[1], keys[party])  # the active party's values, blinded by the party too
        theirs = twice(uploads[party], keys[1])
        found_mine, found_theirs = match(mine, theirs)
        matches[party] = (orders[1].rows(found_mine), found_theirs)
    aligned = align_matches(tables[1], matches, sort_order(tables[1]))
    rows = {1: aligned.rows}
    for party in (2, 3):
        rows[party] = orders[party].rows(aligned.members[party])
    return rows


def _scorer(aligned: np.ndarray) -> AlignedPredictor:
    """A AlignedPredictor over a real APFed-R active half (it predicts without any passive party)."""
    job = JobSpec(JOB, algorithm="apfed_r", num_rows=len(aligned), num_outputs=2)
    parties = PassiveParties(job)
    context = ActiveContext(
        job=job,
        schedule=job.schedule(),
        parties=parties,
        features=torch.zeros(len(aligned), 2),
        labels=torch.arange(len(aligned)) % 2,
        num_outputs=2,
        top_hidden=(4,),
    )
    return AlignedPredictor(job, parties, algorithm_spec(job.algorithm).active_half()(context), aligned)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=ID_SETS, holders=st.lists(HOLDERS, min_size=40, max_size=40), strangers=st.lists(ONE_ID, max_size=5))
def test_every_path_agrees_with_python(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], holders: list[int], strangers: list[str]
) -> None:
    """Each drawn ID set through read, PSI, the saved alignment, scoring and the two CSV files, as Python says."""
    folder = tmp_path_factory.mktemp("ids")
    held: dict[int, list[str]] = {}
    for party in (1, 2, 3):  # a party holds at least one ID: an empty table is refused on reading
        mine = [value for value, who in zip(ids, holders, strict=False) if who & (1 << (party - 1))]
        held[party] = mine or [ids[0]]
    common = sorted(set(held[1]) & set(held[2]) & set(held[3]))

    # ---- read: the csv module's CSV and a Parquet file, by the columnar reader and the exact scan
    tables = {}
    for party, mine in held.items():
        written = _write_csv(folder / f"party{party}.csv", mine)
        parquet = folder / f"party{party}.parquet"
        pq.write_table(
            pa.table({"id": pa.array(mine, pa.string()), "a": np.arange(len(mine), dtype=np.float64)}), parquet
        )
        table = read_party_csv(written)
        assert table.ids.dtype == STRING_IDS and table.ids.tolist() == mine
        assert table.features[:, 0].tolist() == list(range(len(mine)))
        assert read_party_csv(parquet).ids.tolist() == mine
        options = {"id_column": "id", "label_column": None, "feature_columns": None}
        assert read_exactly(written, **options).ids.tolist() == mine == read_exactly(parquet, **options).ids.tolist()
        tables[party] = table

    # ---- PSI, the aligned order, every party's aligned list
    rows = _psi({party: table.ids for party, table in tables.items()})
    aligned = {party: take_rows(tables[party], rows[party]) for party in tables}
    for party, table in aligned.items():
        assert table.ids.tolist() == common, f"party {party}"
        assert table.features[:, 0].tolist() == [held[party].index(value) for value in common]
        assert aligned_digest(table.ids).tobytes() == aligned_digest(np.asarray(common, dtype=object)).tobytes()
    assert is_strictly_increasing(aligned[2].ids) or len(common) < 2

    # ---- the saved alignment, reloaded, puts a passive party's table in the same order
    digests = {party: ids_digest(table.ids) for party, table in tables.items()}
    key = alignment_key(JOB, digests)
    save_alignment(folder / "psi", key, aligned[2].ids, digests[2])
    reloaded = load_alignment(folder / "psi", key, digests[2])
    assert reloaded is not None and reloaded.dtype == STRING_IDS and reloaded.tolist() == common
    assert select_rows(tables[2], reloaded).ids.tolist() == common

    # ---- aligned_ids.csv, read back with the csv module
    assert _csv_column(write_aligned_ids(folder / "run", aligned[1].ids)) == common
    if not common:
        return

    # ---- scoring by ID: the IDs as a KServe BYTES tensor carries them, asked in any order with repeats
    scorer = _scorer(aligned[1].ids)
    asked = [common[n % len(common)] for n in range(0, 3 * len(common), 2)] + strangers
    elements = decode_bytes_elements(encode_bytes_elements(value.encode() for value in asked), len(asked))
    decoded = [as_text(index, element) for index, element in enumerate(elements)]
    assert decoded == asked
    found, missing = scorer.rows_of(decoded)
    row_of = {value: row for row, value in enumerate(common)}
    assert missing == sum(value not in row_of for value in asked)
    if not missing:
        assert found.tolist() == [row_of[value] for value in asked]

    # ---- test_predictions.csv: each held-out row's ID as written
    held_out = np.arange(len(common))[::-1]  # any rows, in any order: here every row, last first
    output = np.zeros((len(held_out), 2), dtype=np.float32)
    write_predictions(folder / "run", "classification", aligned[1].ids[held_out], held_out % 2, output)
    assert _csv_column(folder / "run" / "test_predictions.csv") == [common[row] for row in held_out]


def test_a_request_that_is_not_utf8_names_the_element() -> None:
    """A BYTES element, or a JSON string with a lone surrogate, is refused by position, never replaced."""
    assert as_text(0, "ВИНО-12-ünïcødé".encode()) == "ВИНО-12-ünïcødé"
    with pytest.raises(InferenceInputError, match=r"input 'id': element 3 is not UTF-8 text"):
        as_text(3, b"caf\xe9")
    with pytest.raises(InferenceInputError, match=r"element 1 is not UTF-8 text"):
        as_text(1, "a\udcff")
    for lone in ("a\udcff", "\ud800b"):  # as a REST request's JSON values arrive: kept, then refused by position
        (element,) = array_from_values([lone], "BYTES", (1,)).tolist()
        with pytest.raises(InferenceInputError, match=r"element 2 is not UTF-8 text"):
            as_text(2, element)
