"""A passive party that disappears: the error is UNAVAILABLE-class and names the party."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from vflclient import RunResult
from vflcore.errors import JobAborted, PartyUnavailable
from vflserver.federation.servicer import status_of_error
from vfltesting.eventually import eventually
from vfltesting.in_process import CuttableParty, start_job
from vfltesting.jobs import SMALL_JOB
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration


def _join(parties: dict[int, CuttableParty]) -> None:
    """Wait for every party's thread: one still logging after its test ended (party 3, whose connection
    was cut) wrote to the terminal between pytest's captures. Each join returns once its thread ends."""
    for party in parties.values():
        party.thread.join(60)


class TestPartyOffline:
    def test_inference_with_a_party_gone_names_it(self, pki: Pki, digits_data: Path, tmp_path: Path) -> None:
        """After training, scoring rows while party 3 is offline raises PartyUnavailable for party 3."""
        running = start_job(
            pki, digits_data, tmp_path, replace(SMALL_JOB, epochs=1), offline_grace_s=0.0, keep_serving=True
        )
        parties: dict[int, CuttableParty] = {}
        try:
            parties.update({p: CuttableParty(running.address, pki, digits_data, tmp_path, p) for p in (2, 3)})
            running.thread.join(60)
            assert "summary" in running.outcome, running.outcome
            ids = [str(i) for i in running.active.table.ids[:5]]
            assert running.active.predict_ids(ids).shape == (5, 10)  # everyone online: it works
            parties[3].cut()
            eventually(
                lambda: 3 not in running.active.parties.members.online_parties(), "party 3 offline", 10, every=0.05
            )
            with pytest.raises(PartyUnavailable, match="party 3") as caught:
                running.active.predict_ids(ids)
            assert caught.value.party == 3
            assert status_of_error(caught.value) == (grpc.StatusCode.UNAVAILABLE, str(caught.value))
            running.active.shutdown("test over")
            parties[2].thread.join(20)
            assert isinstance(parties[2].result, RunResult) and parties[2].result.success
        finally:
            running.server.stop(grace=None)
            _join(parties)

    def test_party_leaving_mid_training_fails_the_job_clearly(
        self, pki: Pki, digits_data: Path, tmp_path: Path
    ) -> None:
        """If party 3 vanishes during training, the job fails naming party 3 and party 2 is told why."""
        job = replace(SMALL_JOB, epochs=200)
        running = start_job(pki, digits_data, tmp_path, job, offline_grace_s=0.0)
        parties: dict[int, CuttableParty] = {}
        try:
            parties.update({p: CuttableParty(running.address, pki, digits_data, tmp_path, p) for p in (2, 3)})

            def five_steps() -> bool:
                algorithm = getattr(running.active, "algorithm", None)  # built once PSI has aligned the rows
                return algorithm is not None and len(algorithm.step_losses) >= 5

            eventually(five_steps, "five training steps", 30)
            parties[3].cut()
            running.thread.join(30)
            error = running.outcome.get("error")
            assert isinstance(error, PartyUnavailable) and error.party == 3, running.outcome
            parties[2].thread.join(30)
            result = parties[2].result
            # party 2 learns it either from the Finish task or from its waiting call being aborted
            if isinstance(result, RunResult):
                assert not result.success and "party 3" in result.message
            else:
                assert isinstance(result, JobAborted) and "party 3" in str(result), repr(result)
        finally:
            running.server.stop(grace=None)
            _join(parties)
