"""The in-process AdptVFedConv (Algorithm 1): model transfer, its ablation, determinism, and the order of phases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from vflalgorithms.adptvfedconv import maths as conv
from vflalgorithms.adptvfedconv.reference import ReferenceAdptVFedConv
from vflcore.job.spec import JobSpec

ROWS = 48


def _model(*, model_transfer: bool = True, **options: Any) -> ReferenceAdptVFedConv:
    """A tiny job on random 4x4 pieces: 2 pre-training epochs, 2 fine-tuning epochs, 8 feature channels."""
    job = JobSpec(
        job_id="reference",
        algorithm=conv.NAME,
        seed=5,
        batch_size=16,
        epochs=1,
        optimizer="adam",
        num_rows=ROWS,
        passive_parties=(2, 3, 4),
        algorithm_options={"pretrain_epochs": 2, "finetune_epochs": 2, "channels": 8, **options},
    )
    g = torch.Generator().manual_seed(0)
    pieces = {p: torch.rand(ROWS, 16, generator=g) for p in (1, 2, 3, 4)}
    labels = torch.randint(0, 3, (ROWS,), generator=g).to(torch.float64)
    return ReferenceAdptVFedConv(job, pieces, labels, top_hidden=(8,), model_transfer=model_transfer)


def _distance(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(
        float((x - y).abs().max()) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


class TestReferenceAdptVFedConv:
    def test_passive_extractors_start_from_the_active_one(self) -> None:
        """Eq. 2: with a vanishing encoder lr, every fine-tuned W_e^k is still W_e^1 while W_g^k has learned."""
        model = _model(encoder_lr=1e-12)
        model.train_epoch(0)
        for party in model.passive:
            assert _distance(model.extractors[party], model.extractors[1]) < 1e-9
            losses = model.autoencoder_losses[party]
            assert len(losses) == 2 and losses[-1] < losses[0]

    def test_without_model_transfer_each_party_has_its_own_extractor(self) -> None:
        """The §4.3 ablation: W_e^k comes from party k's own seed, so no two parties share weights."""
        model = _model(model_transfer=False)
        model.train_epoch(0)
        extractors = list(model.extractors.values())
        assert all(_distance(a, b) > 1e-3 for i, a in enumerate(extractors) for b in extractors[i + 1 :])

    def test_same_seed_same_predictions(self) -> None:
        """Seeds and batches come from the job alone: two runs predict bit for bit the same."""
        outputs = []
        for _ in range(2):
            model = _model()
            model.train_epoch(0)
            outputs.append(model.predict(np.arange(ROWS)))
        assert torch.equal(outputs[0], outputs[1])

    def test_predict_before_training_is_refused(self) -> None:
        """The passive parties have no extractor until phase 2 has run."""
        with pytest.raises(RuntimeError, match="train an epoch first"):
            _model().predict(np.arange(4))

    def test_pieces_must_match_the_geometry(self) -> None:
        """A party whose rows are not one flattened piece each is refused, naming the party."""
        model = _model()
        pieces = {p: model.pieces[p].reshape(ROWS, -1) for p in model.pieces}
        pieces[3] = pieces[3][:, :12]
        with pytest.raises(ValueError, match="party 3"):
            ReferenceAdptVFedConv(model.job, pieces, model.labels.to(torch.float64))
