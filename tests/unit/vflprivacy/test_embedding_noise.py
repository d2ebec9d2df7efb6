"""A passive party's embedding protection: rows clipped, noise of the stated scale, drawn where it was drawn before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vflcore.errors import ConfigError
from vflcore.job.privacy import PrivacySpec, check_privacy, privacy_from_table
from vflcore.party_privacy import PartyPrivacy, party_privacy_from_table, refusal
from vflcore.runtime.config import client_config_from
from vflcore.wire.links import TensorExchange, TrainingLink
from vflcore.wire.names import EMBEDDING, EVAL_EMBEDDING, HEAD, PSI_CLIENT_BLINDED
from vflcore.wire.tensors import TensorKey
from vflprivacy.accounting import REPORT_FILE, ReleaseLedger
from vflprivacy.embedding_noise import EmbeddingNoise, NoisyLink, clip_rows, protected_link, protects
from vflprivacy.noise import noise_key


def _rows(n: int = 64, width: int = 8, scale: float = 5.0) -> np.ndarray:
    return np.random.default_rng(0).normal(0.0, scale, size=(n, width)).astype(np.float32)


class TestClipping:
    def test_long_rows_are_brought_to_the_norm_and_short_ones_kept(self) -> None:
        """Every row's L2 norm ends at most C; a row already shorter is unchanged."""
        rows = _rows()
        rows[0] = 0.01  # short
        clipped = clip_rows(rows, 1.5)
        norms = np.linalg.norm(clipped, axis=1)
        assert np.all(norms <= 1.5 + 1e-9)
        assert np.allclose(norms[1:], 1.5)  # the others were all longer
        np.testing.assert_allclose(clipped[0], rows[0], rtol=1e-6)

    def test_rows_of_more_than_one_axis_are_clipped_whole(self) -> None:
        """A feature map (rows, channels, length) is clipped per row over all its entries."""
        maps = np.random.default_rng(1).normal(0.0, 3.0, size=(5, 2, 4))
        clipped = clip_rows(maps, 1.0)
        assert clipped.shape == maps.shape
        np.testing.assert_allclose(np.linalg.norm(clipped.reshape(5, -1), axis=1), 1.0)

    def test_clipping_keeps_a_rows_direction(self) -> None:
        rows = _rows(4)
        clipped = clip_rows(rows, 0.5)
        cosine = np.sum(clipped * rows, axis=1) / (np.linalg.norm(clipped, axis=1) * np.linalg.norm(rows, axis=1))
        np.testing.assert_allclose(cosine, 1.0, rtol=1e-6)


class TestNoise:
    def test_the_noise_has_the_stated_standard_deviation(self, tmp_path: Path) -> None:
        """Noise = sent - clipped has std z·C (2,000 rows × 8 values: within 5 % of it)."""
        noise = EmbeddingNoise(noise_key(tmp_path), party=2, clip=2.0, noise_multiplier=0.75)
        rows = _rows(2000)
        drawn = noise.protect(rows, 0, 0, EMBEDDING) - clip_rows(rows, 2.0)
        assert abs(float(drawn.std()) - 1.5) < 0.075
        assert abs(float(drawn.mean())) < 0.05

    def test_the_same_key_and_position_give_the_same_noise(self, tmp_path: Path) -> None:
        """Equal key, round, batch, party and name: the same bytes; change any one: other noise."""
        key, rows = noise_key(tmp_path), _rows()
        sent = EmbeddingNoise(key, 2, 1.0, 1.0).protect(rows, 3, 1, EMBEDDING)
        np.testing.assert_array_equal(sent, EmbeddingNoise(key, 2, 1.0, 1.0).protect(rows, 3, 1, EMBEDDING))
        others = [
            EmbeddingNoise(key, 2, 1.0, 1.0).protect(rows, 4, 1, EMBEDDING),
            EmbeddingNoise(key, 2, 1.0, 1.0).protect(rows, 3, 2, EMBEDDING),
            EmbeddingNoise(key, 3, 1.0, 1.0).protect(rows, 3, 1, EMBEDDING),
            EmbeddingNoise(key, 2, 1.0, 1.0).protect(rows, 3, 1, EVAL_EMBEDDING),
            EmbeddingNoise(bytes(32), 2, 1.0, 1.0).protect(rows, 3, 1, EMBEDDING),
        ]
        assert all(not np.array_equal(sent, other) for other in others)

    def test_a_persistent_share_repeats_a_rows_noise_across_epochs_and_batches(self, tmp_path: Path) -> None:
        """h^A with ``noise_persistence`` 0.8: row r's noise in epoch 0 and in epoch 1 (another batch, another
        position) correlates at 0.8; without ``rows`` (a passive party's link) the noise is fresh as before."""
        key, rows = noise_key(tmp_path), _rows(2000, scale=0.01)  # inside the clip: sent − rows is the noise
        ids = np.arange(2000) + 10**12
        noise = EmbeddingNoise(key, 1, 1.0, 1.0, persistence=0.8)
        first = noise.protect(rows, 0, 0, EMBEDDING, ids) - rows
        order = np.random.default_rng(2).permutation(2000)
        second = (noise.protect(rows[order], 1, 5, EMBEDDING, ids[order]) - rows[order])[np.argsort(order)]
        assert abs(float(first.std()) - 1.0) < 0.05
        assert float(np.mean(first * second)) == pytest.approx(0.8, abs=0.05)
        fresh = EmbeddingNoise(key, 1, 1.0, 1.0).protect(rows, 0, 0, EMBEDDING)
        np.testing.assert_array_equal(noise.protect(rows, 0, 0, EMBEDDING), fresh)

    def test_without_a_multiplier_rows_are_only_clipped(self, tmp_path: Path) -> None:
        rows = _rows()
        sent = EmbeddingNoise(noise_key(tmp_path), 2, 1.0, 0.0).protect(rows, 0, 0, EMBEDDING)
        np.testing.assert_allclose(sent, clip_rows(rows, 1.0), rtol=1e-6)
        assert sent.dtype == np.float32

    def test_only_float_uploads_on_send_embeddings_are_protected(self) -> None:
        """Embeddings are; a head W_k (FetchHead), PSI bytes and integer tensors are not."""
        floats = np.zeros((2, 3), dtype=np.float32)
        assert protects(EMBEDDING, floats) and protects("infer/r1/embedding", floats)
        assert not protects(HEAD, floats)
        assert not protects(PSI_CLIENT_BLINDED, np.zeros((2, 32), dtype=np.uint8))
        assert not protects(EMBEDDING, np.zeros(3, dtype=np.int64))


class _Recorder(TrainingLink):
    """A link that keeps what it was given (the wire is tested in tests/integration)."""

    def __init__(self) -> None:
        self.sent: list[tuple[TensorKey, np.ndarray]] = []

    def send(self, key: TensorKey, array: np.ndarray) -> None:
        self.sent.append((key, array))

    def receive(self, key: TensorKey) -> np.ndarray:
        return np.zeros((1,), dtype=np.float32)

    def exchange(
        self, job_id: str, round_: int, batches: int, *, up: str, down: str | tuple[str, ...], first: int = 0
    ) -> TensorExchange:
        link = self

        class Round(TensorExchange):
            def send(self, batch: int, array: np.ndarray) -> None:
                link.sent.append((TensorKey(job_id, round_, batch, up), array))

            def receive_bundle(self, batch: int) -> dict[str, np.ndarray]:
                return {"gradient": np.ones((1,), dtype=np.float32)}

            def close(self) -> None: ...

            def cancel(self) -> None: ...

        return Round()


class TestNoisyLink:
    def test_a_round_and_a_single_send_leave_protected_and_are_counted(self, tmp_path: Path) -> None:
        inner = _Recorder()
        spec = PrivacySpec(embedding_clip=1.0, embedding_noise_multiplier=0.5)
        link = protected_link(inner, spec, tmp_path, party=2)
        assert isinstance(link, NoisyLink)
        rows = _rows(4)
        with link.exchange("j", 0, 2, up=EMBEDDING, down="gradient") as exchange:
            exchange.send(0, rows)
            exchange.send(1, rows)
            assert exchange.receive(0).shape == (1,)
        link.send(TensorKey("j", 0, 0, EVAL_EMBEDDING), rows)
        link.send(TensorKey("j", 0, 0, HEAD), rows)
        assert [key.name for key, _ in inner.sent] == [EMBEDDING, EMBEDDING, EVAL_EMBEDDING, HEAD]
        for _, sent in inner.sent[:3]:
            assert not np.allclose(sent, clip_rows(rows, 1.0))  # noised
        np.testing.assert_array_equal(inner.sent[3][1], rows)  # the head is not a per-row tensor
        assert not np.array_equal(inner.sent[0][1], inner.sent[1][1])  # each batch its own noise
        assert len(ReleaseLedger(tmp_path)) == 2  # the round's embeddings and one evaluation

    def test_a_job_without_embedding_protection_gets_the_link_itself(self, tmp_path: Path) -> None:
        inner = _Recorder()
        assert protected_link(inner, PrivacySpec(), tmp_path, party=2) is inner


class TestPersistenceSetting:
    def test_a_share_of_one_or_more_is_refused_naming_the_key(self) -> None:
        """Built in code or read from a file, the share is refused in the same words, naming the key."""
        with pytest.raises(ConfigError, match=r"^PrivacySpec: \[privacy\] noise_persistence = 1 must be below 1"):
            PrivacySpec(label_defence="marvell", noise_persistence=1.0)
        with pytest.raises(ConfigError, match=r"^job.toml: \[privacy\] noise_persistence = 1 must be below 1"):
            privacy_from_table({"label_defence": "marvell", "noise_persistence": 1.0}, "job.toml")

    def test_persistence_without_noise_to_shape_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"noise_persistence = 0.5 shapes the active party's noise"):
            check_privacy(PrivacySpec(label_dp_epsilon=1.0, noise_persistence=0.5))
        apfed = PrivacySpec(active_embedding_clip=1.0, active_embedding_noise_multiplier=1.0, noise_persistence=0.5)
        check_privacy(apfed)
        check_privacy(PrivacySpec(label_defence="max_norm", noise_persistence=0.5))


class TestPartyRequirement:
    def test_a_job_below_the_floor_is_refused_naming_both_keys(self) -> None:
        required = PartyPrivacy(min_embedding_noise_multiplier=1.0, source="party2.toml")
        reason = refusal(required, PrivacySpec(), party=2)
        assert reason is not None
        assert "party2.toml" in reason and "[privacy] min_embedding_noise_multiplier = 1" in reason
        assert "embedding_noise_multiplier is 0" in reason and "party 2" in reason
        weaker = PrivacySpec(embedding_clip=1.0, embedding_noise_multiplier=0.5)
        assert refusal(required, weaker, party=2) is not None

    def test_a_job_at_or_above_the_floor_and_a_party_without_one_are_accepted(self) -> None:
        enough = PrivacySpec(embedding_clip=1.0, embedding_noise_multiplier=1.0)
        assert refusal(PartyPrivacy(min_embedding_noise_multiplier=1.0), enough, party=2) is None
        assert refusal(PartyPrivacy(), PrivacySpec(), party=2) is None

    def test_the_client_config_reads_the_table_and_names_a_bad_key(self, tmp_path: Path) -> None:
        doc = {"client": {"party": 2}, "data": {"path": "x.csv"}, "privacy": {"min_embedding_noise_multiplier": 1}}
        config = client_config_from(doc, tmp_path / "party2.toml")
        assert config.privacy.min_embedding_noise_multiplier == 1.0
        assert "party2.toml" in config.privacy.source
        refused = r"party2\.toml: \[privacy\] has no key 'embedding_clip'.*the job's own settings go in the job file"
        with pytest.raises(ConfigError, match=refused):
            client_config_from({**doc, "privacy": {"embedding_clip": 1.0}}, tmp_path / "party2.toml")
        with pytest.raises(ConfigError, match=r"\[privacy\] min_embedding_noise_multiplier = -1"):
            party_privacy_from_table({"min_embedding_noise_multiplier": -1}, "party2.toml")


def test_the_ledger_survives_a_restart_and_counts_a_release_once(tmp_path: Path) -> None:
    """A release recorded again (a resumed run re-sending it) is not counted twice; a new process reads it back."""
    ledger = ReleaseLedger(tmp_path)
    ledger.record(EMBEDDING, 0)
    ledger.record(EMBEDDING, 0)
    ledger.record(EMBEDDING, 1)
    assert len(ReleaseLedger(tmp_path)) == 2
    assert (tmp_path / REPORT_FILE).stat().st_mode & 0o777 == 0o600
