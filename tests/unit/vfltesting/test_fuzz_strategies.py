"""The fuzz campaign's generators, alone: every strategy draws and builds, every mutation follows any other.

``make bench-fuzz`` once crashed in its own generator (issue 41): a mutation that removed a
request's raw contents was followed by one that set them. These tests draw many examples from
every strategy the campaign uses, and every ordered pair (or triple) of mutations, with no
product running; a strategy that can raise fails here, not in the middle of a campaign.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vflcore.job.distill import distill_keys
from vflcore.job.privacy import privacy_keys
from vflcore.party_privacy import party_privacy_keys
from vflcore.wire.tensors import TensorKey
from vfltesting.fuzz import strategies as fz
from vfltesting.fuzz import surfaces
from vfltesting.rpc import CONTROL, FEDERATION, INFERENCE
from vfltesting.service import job_document

JOBS = ["fuzz-reference", "fuzz-honest-1", "", "other-job"]
#: Deterministic draws: the same examples on every machine and every run.
DRAWS = settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


def _same(key: TensorKey) -> TensorKey:
    return key


def _built(value: Any) -> None:
    """Every message serialises; everything else is a tuple, list or dict of plain values."""
    for part in value if isinstance(value, list) else [value]:
        if isinstance(part, Message):
            part.SerializeToString()


@pytest.mark.parametrize("rpc", [*FEDERATION, *CONTROL, *INFERENCE], ids=str)
def test_every_request_message_draws_and_serialises(rpc: Any) -> None:
    @DRAWS
    @given(fz.messages(rpc.request))
    def draw(message: Message) -> None:
        message.SerializeToString()

    draw()


@pytest.mark.parametrize(
    "strategy",
    [
        fz.chunk_mutants(JOBS, _same),
        fz.request_mutants(JOBS, _same),
        fz.job_document_mutants(job_document("v", "apfed_c")),
        fz.infer_mutants("m", "features", 4),
        fz.rest_mutants("m", "features", 4),
        surfaces.psi_streams(JOBS, _same),
        surfaces.psi_requests(JOBS, _same),
        surfaces.console_routes(JOBS),
        surfaces.table_files(),
        surfaces.job_table_mutants(job_document("v", "apfed_c"), privacy_keys(), distill_keys()),
        surfaces.party_config_mutants({"client": {"party": 2}}, party_privacy_keys(), ("server", "party")),
        st.lists(surfaces.id_strings(), max_size=5),
    ],
    ids=lambda s: repr(s)[:40],
)
def test_every_campaign_strategy_draws_and_builds(strategy: st.SearchStrategy[Any]) -> None:
    @DRAWS
    @given(strategy)
    def draw(value: Any) -> None:
        _built(value)
        if isinstance(value, dict):
            json.dumps(value, default=str)

    draw()


#: Two draws per order: the first is Hypothesis's simplest, the second a random one.
ORDERS = settings(max_examples=2, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("order", list(itertools.product(fz.INFER_MUTATIONS, repeat=2)), ids="-".join)
def test_every_inference_mutation_follows_any_other(order: tuple[str, str]) -> None:
    """The crash of issue 41 was "typed" then "raw"; every ordered pair of the seven breaks is drawn."""

    @ORDERS
    @given(fz.infer_mutants("m", "features", 3, mutations=st.just(list(order))))
    def draw(request: Message) -> None:
        request.SerializeToString()

    draw()


@pytest.mark.parametrize("order", list(itertools.product(fz.TENSOR_MUTATIONS, repeat=2)), ids="-".join)
def test_every_chunk_mutation_follows_any_other(order: tuple[str, str]) -> None:
    @ORDERS
    @given(fz.chunk_mutants(JOBS, _same, mutations=st.just(list(order))))
    def draw(chunks: list[Message]) -> None:
        _built(chunks)

    draw()


@pytest.mark.parametrize("order", list(itertools.product(surfaces.TABLE_MUTATIONS, repeat=2)), ids="-".join)
def test_every_table_mutation_follows_any_other(order: tuple[str, str]) -> None:
    @ORDERS
    @given(surfaces.table_files(mutations=st.just(list(order))))
    def draw(case: tuple[str, bytes]) -> None:
        assert case[0] in (".csv", ".parquet") and isinstance(case[1], bytes)

    draw()


def test_an_unknown_mutation_is_a_clear_error_not_a_silent_no_op() -> None:
    @settings(max_examples=1, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        with pytest.raises(ValueError, match="no inference mutation 'rows'"):
            data.draw(fz.infer_mutants("m", "f", 2, mutations=st.just(["rows"])))

    draw()


def test_a_replay_draws_the_same_cases_up_to_the_failing_one() -> None:
    """A failure's replay line (seed, examples, stop-at) sends that target's cases again, in the same order."""
    from vfltesting.fuzz.campaign import drive
    from vfltesting.fuzz.report import Report, Target, Verdict

    def run(stop_at: int | None) -> tuple[list[str], Report]:
        sent: list[str] = []

        def send(case: Any) -> Verdict:
            sent.append(repr(case))
            return Verdict("seen", "every case fails here" if len(sent) == 30 else None)

        target = Target("tables", "files", surfaces.table_files(), send)
        report = Report()
        drive(target, 40, 7, report, stop_at, lambda: None)
        return sent, report

    campaign, report = run(None)
    replay_line = report.failures[0].rsplit("replay: ", 1)[1]
    assert replay_line.endswith("--seed 7 --cases 40 --stop-at 29")
    replayed, _ = run(29)
    assert len(campaign) == 40 and replayed == campaign[:30]
