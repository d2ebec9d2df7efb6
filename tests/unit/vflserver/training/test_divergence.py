"""Training that runs away: found where it happens, failed in words a user can act on, warned of before.

The whole path over mTLS, with daemons, is ``tests/integration/training/test_divergence.py``; here each
finder alone: the server's loss, what the server would send, what a passive party would send,
checkpoints, the job's message, and the warning of a test loss far past its best.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from vflalgorithms.divergence import divergence_advice, nonfinite, nonfinite_state
from vflalgorithms.halves import ServerAlgorithm
from vflclient import JobEvent
from vflclient._divergence import CheckedLink, checked_state
from vflcore.data.checkpoints import checkpoint_positions, pin, save_position
from vflcore.errors import DivergedServingBest, PartyUnavailable, TrainingDiverged
from vflcore.job.schedule import Position
from vflcore.job.spec import JobSpec
from vflcore.wire.links import TensorExchange, TrainingLink
from vflcore.wire.names import EMBEDDING, EVAL_EMBEDDING, GRADIENT
from vflcore.wire.tensors import TensorKey
from vflserver.federation.passive_parties import PassiveParties
from vflserver.jobs.store import JobStore
from vflserver.training.divergence import (
    DIVERGED,
    WARN_MARGIN,
    StepPosition,
    TestLossWatch,
    best_to_serve,
    forget,
    located,
    remember,
    remembered,
)
from vflserver.training.resume import save_checkpoint

JOB = JobSpec("runaway", optimizer="sgd", learning_rate=0.1, passive_parties=(2, 3), num_rows=10)
NAN = np.array([[1.0, math.nan], [math.inf, 2.0]], dtype=np.float32)


class TestTheMessage:
    def test_it_names_the_step_what_happened_and_the_settings(self) -> None:
        """Epoch and batch from 1, what became non-finite, then the settings with their values."""
        exc = TrainingDiverged("the training loss is NaN", epoch=18, batch=7, advice=divergence_advice(JOB))
        assert str(exc).startswith("training diverged at epoch 18, batch 7: the training loss is NaN; lower ")
        assert "`learning_rate` (now 0.1)" in str(exc) and "`optimizer` (now sgd)" in str(exc)
        assert "checkpoints saved before it are kept" in str(exc)

    def test_located_fills_in_only_what_the_finder_did_not_know(self) -> None:
        """A position the finder gave stays; a missing one and the advice are filled in."""
        bare = TrainingDiverged("the training loss is infinite")
        assert str(bare.located(2, 5, "lower it")) == (
            "training diverged at epoch 2, batch 5: the training loss is infinite; lower it"
        )
        known = TrainingDiverged("the test loss after the epoch is NaN", epoch=3)
        assert str(known.located(9, 9, "lower it")) == (
            "training diverged at epoch 3: the test loss after the epoch is NaN; lower it"
        )

    def test_a_party_report_is_kept_whole(self) -> None:
        """The words a passive party reported are the job's, with the active party's newest checkpoint added."""
        reported = TrainingDiverged("", message="training diverged at epoch 1, batch 2: party 2's embedding ...")
        assert reported.located(5, 5, "other words") is reported

    def test_the_job_message_says_which_checkpoint_is_kept(self, tmp_path: Path) -> None:
        """``located`` adds the active party's newest checkpoint, which the failure keeps, and its folder."""
        save_position(tmp_path, Position(0, 4), {"w": torch.ones(2)})
        exc = located(TrainingDiverged("the training loss is NaN"), JOB, 1, 5, tmp_path)
        assert str(exc).startswith("training diverged at epoch 1, batch 5: the training loss is NaN; lower ")
        assert f"kept (the newest: epoch 1 after 4 batches, in {tmp_path})" in str(exc)

    def test_the_step_in_progress_counts_recorded_steps(self) -> None:
        """A resumed epoch's batches go on from its first batch; each recorded step is one batch done."""
        step = StepPosition()
        step.start(epoch=2, first_batch=4, steps_so_far=100)
        assert step.batch(100) == 5 and step.batch(103) == 8


class TestNonFinite:
    def test_values_are_counted_by_kind(self) -> None:
        """NaN and infinity are counted; finite and integer arrays are fine."""
        assert nonfinite(NAN) == "2 of 4 values are NaN or infinite"
        assert nonfinite(torch.tensor([math.inf, 1.0])) == "1 of 2 values are infinite"
        assert nonfinite(np.ones(3)) is None and nonfinite(np.arange(3)) is None

    def test_a_state_names_its_first_non_finite_entry(self) -> None:
        """Models, optimizer state and losses nested in dicts and lists; RNG bytes are not floats."""
        finite = {"bottom": {"0.weight": torch.ones(2, 2)}, "rng": torch.zeros(4, dtype=torch.uint8), "losses": [0.5]}
        assert nonfinite_state(finite) is None
        broken = {**finite, "optimizer": {"state": {0: {"exp_avg": torch.tensor([1.0, math.nan])}}}}
        assert nonfinite_state(broken) == "optimizer.state.0.exp_avg: 1 of 2 values are NaN"
        assert nonfinite_state({"losses": [0.5, math.inf]}) == "losses[1] is infinite"


class _Half(ServerAlgorithm):
    """A server half with nothing to train: only its ``record_step``."""

    def __init__(self) -> None:
        self.step_losses: list[float] = []

    def train_epoch(self, epoch: int, first_batch: int = 0) -> float:
        return 0.0

    def infer(self, features: torch.Tensor, uploads: Mapping[int, torch.Tensor]) -> torch.Tensor:
        return features

    def eval(self) -> None:
        pass


class _Algorithm:
    """A server half whose state is given."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def state(self) -> dict[str, Any]:
        return self._state


class TestTheActiveParty:
    def test_a_non_finite_training_loss_is_not_recorded(self) -> None:
        """``record_step`` raises, and the losses kept stay finite."""
        half = _Half()
        half.record_step(0.5)
        with pytest.raises(TrainingDiverged, match="the training loss is NaN"):
            half.record_step(math.nan)
        assert half.step_losses == [0.5]

    def test_its_own_bottom_model_output_is_checked_before_the_step(self) -> None:
        """The SplitNN family names h^1 when the active party's own bottom model ran away."""
        from vflalgorithms.splitnn.family import check_own

        check_own([torch.ones(2, 2)])
        with pytest.raises(TrainingDiverged, match=r"own bottom model output is not finite \(1 of 4 values are NaN\)"):
            check_own([torch.tensor([[1.0, math.nan], [0.0, 0.0]])])

    def test_a_checkpoint_is_never_written_from_non_finite_weights(self, tmp_path: Path) -> None:
        """The earlier, finite checkpoint stays the newest on disk."""
        save_checkpoint(tmp_path, Position(0, 1), _Algorithm({"top": torch.ones(2)}), [], keep=1)  # type: ignore[arg-type]
        with pytest.raises(TrainingDiverged, match=r"the active party's model is not finite \(top: 1 of 2"):
            save_checkpoint(tmp_path, Position(0, 2), _Algorithm({"top": torch.tensor([1.0, math.nan])}), [], keep=1)  # type: ignore[arg-type]
        assert checkpoint_positions(tmp_path) == [Position(0, 1)]

    def test_nothing_non_finite_is_sent_to_a_party(self) -> None:
        """A gradient with NaN is not published: the model ran away, and the error says what it would have sent."""
        parties = PassiveParties(JOB)
        with pytest.raises(TrainingDiverged, match="the active party's gradient for party 2 is not finite"):
            parties.publish(2, TensorKey("runaway", 0, 3, GRADIENT), NAN)


class TestAPartyReport:
    def _failed(self, message: str, state: str = "training") -> BaseException:
        parties = PassiveParties(JOB)
        parties.state = state
        parties.liveness.report_failure(2, message)
        with pytest.raises((TrainingDiverged, PartyUnavailable)) as caught:
            parties.liveness.check_online(2)
        return caught.value

    def test_a_reported_divergence_is_the_jobs_error_in_the_partys_words(self) -> None:
        """Not "party 2 is unavailable": the party's own words."""
        words = "training diverged at epoch 4, batch 2: party 2's embedding is not finite (1 of 8 values are NaN)"
        failed = self._failed(f"TrainingDiverged: {words}")
        assert isinstance(failed, TrainingDiverged) and str(failed) == words

    def test_a_refused_nan_tensor_reads_as_divergence_while_training(self) -> None:
        """An older client's NaN, refused by the tensor check, names the party and the divergence."""
        refused = (
            "TensorRejected: SendEmbeddings: data: 3 value(s) are NaN or infinite; only finite values are accepted"
        )
        failed = self._failed(refused)
        assert isinstance(failed, TrainingDiverged)
        assert str(failed).startswith("training diverged: party 2 sent NaN or infinite values, which the server")
        assert isinstance(self._failed(refused, state="serving"), PartyUnavailable)

    def test_any_other_failure_is_the_party_being_unavailable(self) -> None:
        failed = self._failed("CheckpointError: no file")
        assert type(failed) is PartyUnavailable and "it reported a failure: CheckpointError" in str(failed)


class _Exchange(TensorExchange):
    def __init__(self, sent: list[tuple[int, np.ndarray]]) -> None:
        self.sent = sent

    def send(self, batch: int, array: np.ndarray) -> None:
        self.sent.append((batch, array))

    def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
        return {}

    def close(self) -> None:
        pass

    def cancel(self) -> None:
        pass


class _Link(TrainingLink):
    def __init__(self) -> None:
        self.sent: list[tuple[int, np.ndarray]] = []

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        self.sent.append((key.batch, array))

    def receive(self, key: TensorKey) -> np.ndarray:
        return np.zeros(1)

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        return _Exchange(self.sent)


class TestAPassiveParty:
    def test_a_non_finite_upload_is_reported_not_sent(self) -> None:
        """Epoch and batch from 1, the party and what it would have sent; nothing reaches the link."""
        inner = _Link()
        link = CheckedLink(inner, 2, JOB)
        with link.exchange("runaway", 17, 10, up=EMBEDDING, down=GRADIENT) as exchange:
            exchange.send(5, np.ones((2, 2), dtype=np.float32))
            with pytest.raises(TrainingDiverged) as caught:
                exchange.send(6, NAN)
        assert str(caught.value).startswith(
            "training diverged at epoch 18, batch 7: party 2's embedding is not finite (2 of 4 values are NaN or "
            "infinite), so it was not sent; lower `learning_rate` (now 0.1)"
        )
        assert [batch for batch, _ in inner.sent] == [5]

    def test_an_evaluation_upload_names_the_epoch_it_follows(self) -> None:
        with pytest.raises(TrainingDiverged, match=r"^training diverged at epoch 3: party 3's representation"):
            CheckedLink(_Link(), 3, JOB).send(TensorKey("runaway", 2, 0, EVAL_EMBEDDING), NAN)

    def test_its_checkpoint_is_never_written_from_non_finite_weights(self) -> None:
        """A mid-epoch position is named as the batch just done; an epoch's end as the epoch."""
        good = {"algorithm": {"bottom": {"w": torch.ones(2)}}}
        assert checked_state(2, JOB, Position(1, 0), good) is good
        bad = {"algorithm": {"bottom": {"w": torch.tensor([math.inf, 0.0])}}}
        with pytest.raises(TrainingDiverged, match=r"^training diverged at epoch 1, batch 4: party 2's model"):
            checked_state(2, JOB, Position(0, 4), bad)
        with pytest.raises(TrainingDiverged, match=r"^training diverged at epoch 2: party 2's model .* the end of"):
            checked_state(2, JOB, Position(2, 0), bad)


class TestTheTestLossWarning:
    def test_a_loss_far_past_its_best_warns_once_per_order_of_magnitude(self) -> None:
        """10x the best and 1.0 above it warns; it warns again only at 10x the loss last warned of."""
        watch = TestLossWatch()
        said = [watch.observe(e, loss, JOB) for e, loss in enumerate([0.5, 0.3, 2.0, 3.5, 3.0, 20.0, 40.0, 36.0])]
        assert [e for e, words in enumerate(said) if words] == [3, 6]
        assert said[3] is not None and said[3].startswith(
            "the test loss after epoch 4 is 3.5, over 10 times its best (0.3, after epoch 2): training may be "
            "running away; if it goes on growing, lower `learning_rate` (now 0.1)"
        )

    def test_a_small_loss_needs_the_margin_too(self) -> None:
        """0.001 to 0.5 is 500x, but not 1.0 above the best: no warning."""
        watch = TestLossWatch()
        assert watch.observe(0, 0.001, JOB) is None
        assert watch.observe(1, 0.001 + WARN_MARGIN - 0.01, JOB) is None
        assert watch.observe(2, math.nan, JOB) is None  # not a warning: NaN fails the job

    def test_the_warning_is_an_event_of_the_job(self, tmp_path: Path) -> None:
        """The store keeps it as a "warning" event in the job's state; ``vfl-jobs watch`` prints it as one."""
        store = JobStore(tmp_path / "jobs.sqlite")
        try:
            store.submit("runaway", {"job": {}}, algorithm="splitnn", epochs=3, submitter="alice")
            store.set_state("runaway", "aligning")
            store.set_state("runaway", "training")
            event = store.record_warning("runaway", "the test loss after epoch 4 is 3.5, ...")
            assert (event.kind, event.state) == ("warning", "training")
            assert store.events("runaway")[-1] == event
            assert store.get("runaway").state == "training"
        finally:
            store.close()
        shown = JobEvent("runaway", event.seq, event.at, "warning", "training", event.message, None, {})
        assert str(shown) == "runaway warning: the test loss after epoch 4 is 3.5, ..."


class TestServingTheBestEpoch:
    """With validation rows, a job that runs away after its best epoch pauses and comes back to serve it."""

    def test_only_a_pinned_checkpoint_on_disk_is_served(self, tmp_path: Path) -> None:
        best = Position.after_epoch(2)
        assert best_to_serve(best, tmp_path) is None  # nothing saved
        save_position(tmp_path, best, {"w": torch.ones(2)}, keep=1)
        assert best_to_serve(best, tmp_path) is None  # saved, but not pinned: the parties were not told to keep it
        pin(tmp_path, best)
        assert best_to_serve(best, tmp_path) == best
        assert best_to_serve(None, tmp_path) is None  # no validation rows, or no epoch scored yet
        assert best_to_serve(Position.after_epoch(1), tmp_path) is None  # another epoch than the pinned one

    def test_the_divergence_is_remembered_across_a_restart_until_a_fresh_start(self, tmp_path: Path) -> None:
        assert remembered(tmp_path) is None
        diverged = TrainingDiverged("party 3's embedding is not finite", epoch=5, batch=3)
        remember(tmp_path, diverged)
        assert (
            remembered(tmp_path)
            == str(diverged)
            == "training diverged at epoch 5, batch 3: party 3's embedding is not finite"
        )
        forget(tmp_path)
        assert remembered(tmp_path) is None
        (tmp_path / DIVERGED).write_text("{not json")
        assert remembered(tmp_path) is None  # a torn note is no divergence: the job trains on

    def test_the_pause_says_what_diverged_and_what_is_served(self) -> None:
        serving = DivergedServingBest("training diverged at epoch 5, batch 3: x", str(Position.after_epoch(3)))
        assert str(serving) == (
            "training diverged at epoch 5, batch 3: x; the job resumes to serve its best epoch by validation "
            "(the end of epoch 4)"
        )
