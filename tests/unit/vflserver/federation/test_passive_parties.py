"""The active party's view of the passive parties: liveness, lost parties, and tensors applied once."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
import structlog

from vflcore.absence import did_not_come_back, did_not_join
from vflcore.errors import JobAborted, JoinRejected, PartyLost, PartyUnavailable, TensorError
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.status import STATUS
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Finish
from vflserver.federation.board import JobBoard
from vflserver.federation.liveness import UNANSWERED_S
from vflserver.federation.passive_parties import PassiveParties
from vflserver.federation.servicer import concerns_this_run
from vflserver.training.served_again.terms import RejoinTerms

JOB = JobSpec("j", passive_parties=(2, 3), num_rows=10)


def _online(**kwargs: float) -> PassiveParties:
    parties = PassiveParties(JOB, offline_grace_s=0.0, **kwargs)
    for party in (2, 3):
        parties.join(party, b"", 10, frozenset(), (Position(1), Position(1, 5)))
        parties.liveness.subscribe(party)
    return parties


def _session(parties: PassiveParties, party: int) -> int:
    """The number of ``party``'s open Subscribe stream."""
    return parties.members.member(party).session


class TestTensorsAppliedOnce:
    def test_a_tensor_sent_again_after_it_was_used_is_refused(self) -> None:
        """Once the loop took (2, epoch 0, batch 1), the same key again is refused: no step applies twice."""
        parties = _online()
        key = TensorKey("j", 0, 1, "embedding")
        parties.expect("embedding", 0, 1, (2, 4))
        array = np.ones((2, 4), np.float32)
        parties.uploads.accept(2, key, array)
        assert np.array_equal(parties.uploads.gather_from(2, "embedding", 0, 1), array)
        with pytest.raises(TensorError, match="expects no"):
            parties.uploads.accept(2, key, array)

    def test_an_upload_from_a_lost_party_is_aborted_not_refused_as_malformed(self) -> None:
        """A party marked lost (the job paused while its link was down) gets JobAborted, so it rejoins.

        TCP delivers what a link held once it comes back: an upload from before the pause must
        not count as the party's own failure, which would fail the resumed job.
        """
        parties = _online()
        parties.liveness.lose(3, "its link went down")
        with pytest.raises(JobAborted, match="party 3 has not joined this run"):
            parties.uploads.accept(3, TensorKey("j", 0, 0, "embedding"), np.zeros((1, 2), np.float32))

    def test_a_call_of_an_earlier_run_is_aborted(self) -> None:
        """A party that has not joined the resumed run, or is lost in it, gets JobAborted for any tensor call.

        A download it asked for just before the pause (PSI's, say) reached the resumed run: it waited
        there for a tensor this run never publishes for it, holding the party away from the run until
        ``party_timeout_s`` failed the job (seen in test_recovery, 2026-11-29). Now it ends at once.
        """
        resumed = PassiveParties(JOB, offline_grace_s=0.0)
        resumed.join(2, b"", 10, frozenset(), ())
        resumed.liveness.subscribe(2)
        resumed.uploads.require_in_this_run(2)  # joined: its calls go on
        with pytest.raises(JobAborted, match="party 3 has not joined this run of job 'j'"):
            resumed.uploads.require_in_this_run(3)
        resumed.liveness.lose(2, "its link went down")
        with pytest.raises(JobAborted, match="party 2 has not joined this run"):
            resumed.uploads.require_in_this_run(2)

    def test_a_failure_report_of_an_earlier_run_does_not_fail_the_resumed_one(self) -> None:
        """Only a report about this run counts: a refusal before Join (task 0), or a task of a party in it."""
        resumed = PassiveParties(JOB, offline_grace_s=0.0)
        resumed.join(2, b"", 10, frozenset(), ())
        assert concerns_this_run(resumed, 2, "j", 7)
        assert concerns_this_run(resumed, 3, "j", 0)  # e.g. it has no dataset of the job's name
        assert not concerns_this_run(resumed, 3, "j", 7)  # its task of the run that paused
        assert not concerns_this_run(resumed, 2, "another-job", 7)
        assert not concerns_this_run(resumed, 4, "j", 0)  # not a party of the job

    def test_with_no_job_open_a_party_call_is_aborted_not_a_failure(self) -> None:
        """Between a paused run and its resumption no job is open: an upload racing the pause is ABORTED.

        It was FAILED_PRECONDITION (JoinRejected), which the party reported as its failure, and the
        resumed run failed on that report (test_recovery_adptvfedconv, 2026-11-29).
        """
        board = JobBoard()
        with pytest.raises(JobAborted, match="no job is running now; party 2 takes the next one"):
            board.for_party(2)
        assert STATUS[JobAborted] == grpc.StatusCode.ABORTED

    def test_a_tensor_sent_twice_before_use_is_taken_once(self) -> None:
        """A re-send that arrives before the loop takes the tensor replaces it: the loop sees one tensor."""
        parties = _online()
        key = TensorKey("j", 0, 0, "embedding")
        parties.expect("embedding", 0, 0, (1, 2))
        parties.uploads.accept(3, key, np.zeros((1, 2), np.float32))
        parties.uploads.accept(3, key, np.zeros((1, 2), np.float32))
        parties.uploads.gather_from(3, "embedding", 0, 0)
        assert len(parties.uploads.mailbox) == 0


class TestLiveness:
    def test_a_silent_party_is_lost_after_the_heartbeat_timeout(self) -> None:
        """No heartbeat for heartbeat_timeout_s: PartyLost naming the party and the setting, though online.

        Party 3's last sign of life is moved back past the limit rather than waited out: a sleep
        of twice a short limit asked party 2's heartbeat and check to finish within the limit on a
        busy worker (issue 40). Party 2 has a limit of minutes to stay within.
        """
        parties = _online(heartbeat_timeout_s=60.0)
        parties.members.member(3).last_seen -= 120.0
        parties.liveness.heartbeat(2)
        parties.liveness.check_online(2)
        with pytest.raises(PartyLost, match=r"party 3 .*heartbeat_timeout_s") as caught:
            parties.liveness.check_online(3)
        assert caught.value.party == 3

    def test_a_closed_stream_is_lost_a_reported_failure_is_not(self) -> None:
        """A closed stream may come back (PartyLost); a party that reported a failure would fail again."""
        parties = _online()
        parties.liveness.leave(2, _session(parties, 2))
        with pytest.raises(PartyLost, match="connection to the server closed"):
            parties.liveness.check_online(2)
        parties.liveness.report_failure(3, "disk full")
        with pytest.raises(PartyUnavailable, match="disk full") as caught:
            parties.liveness.check_online(3)
        assert not isinstance(caught.value, PartyLost)

    def test_a_connection_that_timed_out_says_so(self) -> None:
        """A stream that closed after the party was silent past the server's unanswered-data limit timed out.

        A pulled cable: the kernel drops the connection once the server's data goes unacknowledged
        for ``UNANSWERED_S`` (gRPC's keepalive timeout, as TCP_USER_TIMEOUT), so the party had been
        silent at least that long when its stream closed. Its last sign of life is moved back rather
        than waited out. A daemon that stops closes its stream while it is still heard from.
        """
        parties = _online()
        parties.members.member(3).last_seen -= UNANSWERED_S + 4
        parties.liveness.leave(3, _session(parties, 3))
        with pytest.raises(PartyLost, match=rf"timed out: nothing came from it for {UNANSWERED_S + 4:.0f} s"):
            parties.liveness.check_online(3)
        parties.liveness.leave(2, _session(parties, 2))
        with pytest.raises(PartyLost, match=r"closed \(its daemon stopped") as caught:
            parties.liveness.check_online(2)
        assert "timed out" not in caught.value.reason

    def test_a_stream_that_ends_after_finish_is_no_warning(self) -> None:
        """A routine end (the server sent Finish) logs party_left; a stream that closes unasked warns party_offline."""
        parties = _online()
        with structlog.testing.capture_logs() as logs:
            parties.liveness.leave(2, _session(parties, 2))
            parties.tasks.finish(True, "done")
            parties.liveness.leave(3, _session(parties, 3))
        assert [(e["event"], e["log_level"], e["peer"]) for e in logs] == [
            ("party_offline", "warning", 2),
            ("party_left", "info", 3),
        ]

    def test_a_party_that_ended_the_job_still_warns_after_finish(self) -> None:
        """Finish after a party's own failure (a daemon stopped by a signal reports one) is no routine end for it."""
        parties = _online()
        with structlog.testing.capture_logs() as logs:
            parties.liveness.report_failure(2, "stopped by signal")
            parties.tasks.finish(False, "party 2 failed")
            parties.liveness.leave(2, _session(parties, 2))
            parties.liveness.leave(3, _session(parties, 3))
        assert [(e["event"], e["peer"]) for e in logs if e["event"] != "party_failed"] == [
            ("party_offline", 2),
            ("party_left", 3),
        ]

    def test_a_second_stream_is_refused_while_the_first_is_open(self) -> None:
        """One Subscribe stream per party: a second is JoinRejected; once the first closed, a new one is taken."""
        parties = _online()
        old = _session(parties, 2)
        with pytest.raises(JoinRejected, match="party 2 already has a Subscribe stream open"):
            parties.liveness.subscribe(2)
        parties.liveness.leave(2, old)
        _, new = parties.liveness.subscribe(2)
        assert new != old and 2 in parties.members.online_parties()

    def test_an_old_stream_closing_late_does_not_take_the_party_offline(self) -> None:
        """A stream from before a restart (unjoin) closes after the new one opened: the party stays online."""
        parties = _online()
        old = _session(parties, 2)
        parties.members.unjoin(2)
        parties.join(2, b"", 10, frozenset(), ())
        parties.liveness.subscribe(2)
        parties.liveness.leave(2, old)
        assert 2 in parties.members.online_parties()

    def test_a_restarted_party_is_lost_at_once(self) -> None:
        """lose() (its daemon asked for a new job mid-job) fails the next wait with the reason."""
        parties = _online()
        parties.liveness.lose(3, "it asked for a new job")
        with pytest.raises(PartyLost, match="asked for a new job"):
            parties.liveness.check_online(3)

    def test_join_records_the_checkpoints_a_party_holds(self) -> None:
        """The epochs a party can resume from travel with its Join."""
        assert _online().members.member(2).checkpoints == (Position(1), Position(1, 5))


class TestPause:
    def test_rejoin_finish_reaches_every_party(self) -> None:
        """finish(rejoin=True) queues Finish(rejoin) for every party: each daemon comes back for the job."""
        parties = _online()
        parties.tasks.finish(False, "paused", rejoin=True)
        for party in (2, 3):
            task = parties.members.member(party).tasks.get_nowait()
            assert isinstance(task, Finish) and task.rejoin and not task.success


FINAL = Position(1)
TERMS = RejoinTerms(b"alignment-key", FINAL)


def _served() -> tuple[JobBoard, PassiveParties]:
    """A job whose training ended with both parties online, its federated model served and open to rejoins."""
    parties = PassiveParties(JOB, offline_grace_s=0.0)
    for party in (2, 3):
        parties.join(party, b"ids-" + bytes([party]), 10, frozenset({b"alignment-key"}), (FINAL,))
        parties.liveness.subscribe(party)
    parties.state = "serving"
    parties.rejoins.accept(TERMS)
    board = JobBoard()
    board.open(parties, {})
    return board, parties


class TestRejoinAServedModel:
    def test_a_stopped_readmission_wait_ends_when_woken(self) -> None:
        """``next_rejoined`` told to stop returns None once woken, not at its timeout: the next job starts at once."""
        _, parties = _served()
        stop = threading.Event()
        got: list[int | None] = []
        waiter = threading.Thread(target=lambda: got.append(parties.rejoins.next_rejoined(300, stop.is_set)))
        waiter.start()
        stop.set()
        parties.members.wake_waiters()
        waiter.join(30)  # a "did not hang" guard: before, it waited out its whole timeout
        assert not waiter.is_alive() and got == [None]

    def test_a_restarted_party_is_offered_the_job_and_readmitted_after_loading(self) -> None:
        """NextJob from a member: offered the job; Join and Subscribe; "loading" until readmitted, then it serves."""
        board, parties = _served()
        parties.liveness.leave(3, _session(parties, 3))  # its daemon was killed
        assert "connection to the server closed" in (parties.liveness.absence(3) or "")
        offer = board.next_offer(3, 0, lambda: True)  # the restarted daemon asks for a job
        assert offer is not None and offer.job.job_id == "j"
        assert "reconnected" in (parties.liveness.absence(3) or "")
        parties.join(3, b"ids-\x03", 10, frozenset({b"alignment-key"}), (Position(0, 5), FINAL))
        parties.liveness.subscribe(3)
        assert parties.rejoins.next_rejoined(0) == 3
        with pytest.raises(PartyLost, match="loading its trained part"):
            parties.liveness.check_online(3)
        parties.rejoins.readmitted(3)
        assert parties.liveness.absence(3) is None and parties.liveness.absence(2) is None
        parties.liveness.check_online(3)

    @pytest.mark.parametrize(
        ("digest", "cached", "held", "why"),
        [
            (b"other-ids", frozenset({b"alignment-key"}), (FINAL,), "IDs differ"),
            (b"ids-\x03", frozenset(), (FINAL,), "saved alignment"),
            (b"ids-\x03", frozenset({b"alignment-key"}), (Position(0, 5),), "no readable checkpoint"),
        ],
    )
    def test_a_party_without_what_the_model_needs_is_refused_once(
        self, digest: bytes, cached: frozenset[bytes], held: tuple[Position, ...], why: str
    ) -> None:
        """Other data, no saved alignment, no final checkpoint: refused naming why, and not offered the job again."""
        board, parties = _served()
        parties.liveness.leave(3, _session(parties, 3))
        assert board.next_offer(3, 0, lambda: True) is not None
        with pytest.raises(JoinRejected, match=why):
            parties.join(3, digest, 10, cached, held)
        assert board.next_offer(3, 0, lambda: True) is None
        assert why in (parties.liveness.absence(3) or "")

    def test_a_job_not_kept_served_takes_no_rejoin(self) -> None:
        """Without rejoins.accept (the model is not served), a party that asks again is not offered the job."""
        parties = _online()
        parties.state = "serving"
        board = JobBoard()
        board.open(parties, {})
        parties.liveness.leave(3, _session(parties, 3))
        assert board.next_offer(3, 0, lambda: True) is None
        with pytest.raises(JoinRejected, match="joined too late"):
            parties.join(3, b"", 10, frozenset(), ())


class TestWhenTheLossHappened:
    """``PartyLost.since`` is the loss itself, so ``party_timeout_s`` is not counted from its detection."""

    def test_a_closed_stream_is_lost_since_it_closed(self) -> None:
        """The grace period spent noticing is not part of it: ``since`` is the stream's close."""
        parties = _online()
        parties.liveness.leave(3, _session(parties, 3))
        closed = parties.members.member(3).offline_since
        with pytest.raises(PartyLost) as lost:
            parties.liveness.check_online(3)
        assert closed is not None and lost.value.since == closed

    def test_a_silent_party_is_lost_since_it_was_last_heard_from(self) -> None:
        """Not since heartbeat_timeout_s ran out: since its last Heartbeat."""
        parties = _online(heartbeat_timeout_s=0.01)
        heard = parties.members.member(2).last_seen
        time.sleep(0.05)
        with pytest.raises(PartyLost) as lost:
            parties.liveness.check_online(2)
        assert lost.value.since == heard

    def test_a_restarted_party_is_lost_since_its_old_stream_closed(self) -> None:
        """A daemon that restarts after its stream closed: the loss is the close, not its new NextJob."""
        parties = _online()
        parties.liveness.leave(3, _session(parties, 3))
        closed = parties.members.member(3).offline_since
        parties.liveness.lose(3, "it asked for a new job")
        with pytest.raises(PartyLost) as lost:
            parties.liveness.check_online(3)
        assert lost.value.since == closed


class TestLateParties:
    def test_the_join_limit_is_worded_by_vflcore_absence(self) -> None:
        """A party that never joined: the configured limit, the setting and the missing parties, in one sentence."""
        parties = PassiveParties(JOB)
        with pytest.raises(PartyUnavailable) as late:
            parties.members.wait_until_ready(0.05, threading.Event())
        assert str(late.value) == str(did_not_join([2, 3], 0.05))
        assert "party 2 is unavailable: it did not join within 0.05 s" in str(late.value)

    def test_a_caller_words_its_own_limit(self) -> None:
        """``late`` replaces the default: the runner's words for a resumed job reach the parties unchanged."""
        parties = PassiveParties(JOB)
        words = did_not_come_back(3, 120, "its connection to the server closed", "no checkpoint has been saved yet")
        with pytest.raises(PartyUnavailable) as late:
            parties.members.wait_until_ready(0.01, threading.Event(), late=lambda missing: words)
        assert late.value is words
