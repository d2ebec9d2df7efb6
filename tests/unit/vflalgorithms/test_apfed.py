"""APFed's mathematics (seed 001 Eq. 9, 12, 14-16), its options, and SingleVL as λ = 0 in the reference."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from vflalgorithms.apfed.maths import APFED_C, APFED_R, combine, contrastive_loss, passive_weight, reconstruction_loss
from vflalgorithms.apfed.reference import ReferenceAPFed
from vflalgorithms.options import algorithm_options
from vflcore.errors import ConfigError
from vflcore.job.spec import JobSpec
from vflcore.ml.models import build_seeded


def _cosine(u: torch.Tensor, v: torch.Tensor) -> float:
    return float(u @ v) / (float(u.norm()) * float(v.norm()))


def _contrastive_by_the_letter(active: torch.Tensor, passive: torch.Tensor, temperature: float) -> float:
    """Eq. 14-16 written out term by term, with plain Python floats."""
    n = len(active)
    total = 0.0
    for i in range(n):
        positive = math.exp(_cosine(active[i], passive[i]) / temperature)
        denominator = 0.0
        for j in range(n):
            indicator = 1.0 if j != i else 0.0
            denominator += indicator * math.exp(_cosine(active[i], active[j]) / temperature)
            denominator += math.exp(_cosine(active[i], passive[j]) / temperature)
        total += -math.log(positive / denominator)
    return total / n


class TestContrastiveLoss:
    @pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0])
    @pytest.mark.parametrize("rows", [2, 5])
    def test_equals_the_literal_sum(self, temperature: float, rows: int) -> None:
        """The vectorised loss equals Eq. 14-16 computed one pair at a time."""
        g = torch.Generator().manual_seed(rows)
        active = torch.randn(rows, 4, generator=g, dtype=torch.float64)
        passive = torch.randn(rows, 4, generator=g, dtype=torch.float64)
        got = float(contrastive_loss(active, passive, temperature))
        assert got == pytest.approx(_contrastive_by_the_letter(active, passive, temperature), rel=1e-12)

    def test_depends_on_directions_only(self) -> None:
        """The similarity is the cosine (Eq. 15): rescaling any row leaves the loss unchanged."""
        g = torch.Generator().manual_seed(7)
        active = torch.randn(6, 3, generator=g, dtype=torch.float64)
        passive = torch.randn(6, 3, generator=g, dtype=torch.float64)
        scale = torch.rand(6, 1, generator=g, dtype=torch.float64) * 10 + 0.1
        assert float(contrastive_loss(active * scale, passive / scale, 0.5)) == pytest.approx(
            float(contrastive_loss(active, passive, 0.5)), rel=1e-12
        )


class TestReconstructionLoss:
    def test_is_the_mean_squared_error(self) -> None:
        """Eq. 12 with the L2 loss: the mean of the squared differences over every entry."""
        g = torch.Generator().manual_seed(1)
        decoded = torch.randn(5, 3, generator=g, dtype=torch.float64)
        features = torch.randn(5, 3, generator=g, dtype=torch.float64)
        expected = sum(float(d - x) ** 2 for d, x in zip(decoded.flatten(), features.flatten(), strict=True)) / 15
        assert float(reconstruction_loss(decoded, features)) == pytest.approx(expected, rel=1e-12)


class TestCombine:
    @staticmethod
    def _setup() -> tuple[torch.Tensor, torch.nn.Linear, torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        h = torch.randn(8, 4, generator=g, dtype=torch.float64, requires_grad=True)  # h^A
        classifier = build_seeded(lambda: torch.nn.Linear(4, 3).double(), seed=0)  # g_T
        assert isinstance(classifier, torch.nn.Linear)
        labels = torch.randint(0, 3, (8,), generator=g)
        decoder_weight = torch.randn(5, 4, generator=g, dtype=torch.float64)  # a linear DEC_p
        return h, classifier, labels, decoder_weight

    def test_gradient_at_h_is_eq_9(self) -> None:
        """∂/∂h^A of the combined scalar is ∂L_A/∂h^A + Σ_p λ_p ∂L_p/∂h^A, as if L_A + Σ λ_p L_p were one graph."""
        h, classifier, labels, decoder = self._setup()
        g = torch.Generator().manual_seed(1)
        features = {p: torch.randn(8, 5, generator=g, dtype=torch.float64) for p in (2, 3)}
        weights = {2: 0.5, 3: 2.0}
        gradients = {}
        for party, x in features.items():  # what each passive party sends back
            leaf = h.detach().clone().requires_grad_(True)
            (gradients[party],) = torch.autograd.grad(reconstruction_loss(leaf @ decoder.T, x), leaf)
        active_loss = F.cross_entropy(classifier(h), labels)
        (got,) = torch.autograd.grad(combine(active_loss, h, [(weights[p], gradients[p]) for p in features]), h)
        (active_only,) = torch.autograd.grad(F.cross_entropy(classifier(h), labels), h)
        expected = active_only + sum(weights[p] * gradients[p] for p in features)
        torch.testing.assert_close(got, expected)
        whole = F.cross_entropy(classifier(h), labels) + sum(
            weights[p] * reconstruction_loss(h @ decoder.T, x) for p, x in features.items()
        )
        (through_one_graph,) = torch.autograd.grad(whole, h)  # Eq. 8 differentiated directly
        torch.testing.assert_close(got, through_one_graph)

    def test_zero_weight_leaves_the_active_gradient(self) -> None:
        """With λ = 0 the passive gradient is ignored: ∂/∂h^A is ∂L_A/∂h^A exactly."""
        h, classifier, labels, _ = self._setup()
        active_loss = F.cross_entropy(classifier(h), labels)
        (got,) = torch.autograd.grad(combine(active_loss, h, [(0.0, torch.full((8, 4), 1e6, dtype=torch.float64))]), h)
        (expected,) = torch.autograd.grad(F.cross_entropy(classifier(h), labels), h)
        assert torch.equal(got, expected)

    def test_the_classifier_gets_only_its_own_gradient(self) -> None:
        """The passive terms reach h^A's backward pass and nothing of g_T."""
        h, classifier, labels, _ = self._setup()
        combined = combine(F.cross_entropy(classifier(h), labels), h, [(3.0, torch.ones(8, 4, dtype=torch.float64))])
        (got,) = torch.autograd.grad(combined, classifier.weight)
        (expected,) = torch.autograd.grad(F.cross_entropy(classifier(h), labels), classifier.weight)
        torch.testing.assert_close(got, expected)


class TestPassiveWeight:
    def test_defaults_to_one(self) -> None:
        """λ_p is 1 when the config says nothing, read raw or through the filled-in defaults."""
        assert passive_weight({}, 2) == 1.0
        assert passive_weight(algorithm_options(APFED_R, {}), 3) == 1.0

    def test_weight_applies_to_every_party(self) -> None:
        """``weight`` sets λ_p for every passive party."""
        options = algorithm_options(APFED_C, {"weight": 0.25})
        assert [passive_weight(options, p) for p in (2, 3, 4)] == [0.25, 0.25, 0.25]

    def test_party_weights_override_per_party(self) -> None:
        """``party_weights`` overrides ``weight`` for the parties it names, and only those."""
        options = algorithm_options(APFED_R, {"weight": 0.25, "party_weights": {"3": 2.0, "4": 0}})
        assert [passive_weight(options, p) for p in (2, 3, 4)] == [0.25, 2.0, 0.0]


class TestOptions:
    def test_defaults(self) -> None:
        """APFed-R takes λ (one or per party); APFed-C adds the temperature of Eq. 14."""
        assert algorithm_options(APFED_R, {}) == {"weight": 1.0, "party_weights": {}}
        assert algorithm_options(APFED_C, {}) == {"weight": 1.0, "party_weights": {}, "temperature": 0.5}

    @pytest.mark.parametrize(
        ("algorithm", "given", "message"),
        [
            (APFED_R, {"weight": -0.5}, r"\[algorithm\] weight must be a finite number of at least 0"),
            (APFED_R, {"weight": float("nan")}, r"\[algorithm\] weight must be a finite number"),
            (APFED_R, {"weight": float("inf")}, r"\[algorithm\] weight must be a finite number"),
            (APFED_R, {"weight": "1"}, r"\[algorithm\] weight must be a finite number"),
            (APFED_C, {"weight": True}, r"\[algorithm\] weight must be a finite number"),
            (
                APFED_R,
                {"party_weights": {"2": -1}},
                r"\[algorithm\] party_weights\.2 must be a finite number of at least 0",
            ),
            (APFED_C, {"party_weights": {"3": "half"}}, r"\[algorithm\] party_weights\.3 must be a finite number"),
            (APFED_R, {"party_weights": [0.5, 1.0]}, r"\[algorithm\] party_weights must be a table"),
            (APFED_R, {"party_weights": 0.5}, r"\[algorithm\] party_weights must be a table"),
            (APFED_C, {"party_weights": {"two": 1.0}}, r"\[algorithm\] party_weights keys are party ids.*'two'"),
            (APFED_C, {"temperature": 0}, r"\[algorithm\] temperature must be a positive number"),
            (APFED_C, {"temperature": -0.1}, r"\[algorithm\] temperature must be a positive number"),
            (APFED_C, {"temperature": "warm"}, r"\[algorithm\] temperature must be a positive number"),
            (APFED_R, {"temperature": 0.5}, r"\[algorithm\] temperature is not an option of 'apfed_r'"),
            (APFED_C, {"lambda": 1.0}, r"\[algorithm\] lambda is not an option of 'apfed_c'"),
        ],
    )
    def test_bad_values_are_refused_naming_the_key(self, algorithm: str, given: dict[str, Any], message: str) -> None:
        """A bad or unknown option raises ConfigError with the key in the message."""
        with pytest.raises(ConfigError, match=message):
            algorithm_options(algorithm, given)


def _job(algorithm: str, passive: tuple[int, ...], options: dict[str, Any]) -> JobSpec:
    return JobSpec(
        job_id="apfed-unit",
        algorithm=algorithm,
        seed=3,
        batch_size=16,
        epochs=2,
        embedding_dim=4,
        bottom_hidden=(8,),
        optimizer="sgd",
        learning_rate=0.1,
        test_fraction=0.25,
        num_rows=48,
        passive_parties=passive,
        algorithm_options=options,
    )


def _data(passive_seed: int = 1) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """Party 1's rows and labels are fixed; the passive parties' rows come from ``passive_seed``."""
    g = torch.Generator().manual_seed(0)
    active = torch.randn(48, 6, generator=g)
    labels = torch.randint(0, 3, (48,), generator=g).to(torch.float64)
    other = torch.Generator().manual_seed(passive_seed)
    features = {1: active, 2: torch.randn(48, 5, generator=other), 3: torch.randn(48, 7, generator=other)}
    return features, labels


def _trained(job: JobSpec, features: dict[int, torch.Tensor], labels: torch.Tensor) -> ReferenceAPFed:
    model = ReferenceAPFed(job, {p: features[p] for p in (1, *job.passive_parties)}, labels, top_hidden=())
    for epoch in range(job.epochs):
        model.train_epoch(epoch)
    return model


class TestSingleVLIsZeroWeight:
    @pytest.mark.parametrize("algorithm", [APFED_R, APFED_C])
    def test_zero_weight_predicts_as_the_active_party_alone(self, algorithm: str) -> None:
        """λ = 0 for every passive party gives the same steps and predictions as no passive party at all."""
        features, labels = _data()
        alone = _trained(_job(algorithm, (), {"weight": 0.0}), features, labels)
        helped = _trained(_job(algorithm, (2, 3), {"weight": 0.0}), features, labels)
        rows = alone.schedule.test_rows
        assert helped.step_losses == alone.step_losses
        assert torch.equal(helped.predict(rows), alone.predict(rows))

    def test_zero_weight_ignores_the_passive_features(self) -> None:
        """λ = 0: the active party's encoder ends the same whatever the passive parties hold."""
        labels = _data()[1]
        models = [_trained(_job(APFED_C, (2, 3), {"weight": 0.0}), _data(seed)[0], labels) for seed in (1, 2)]
        for a, b in zip(models[0].encoder.parameters(), models[1].encoder.parameters(), strict=True):
            assert torch.equal(a, b)

    def test_a_party_with_zero_weight_counts_for_nothing(self) -> None:
        """``party_weights`` of 0 for party 3 trains exactly as if party 3 had not joined."""
        features, labels = _data()
        without = _trained(_job(APFED_R, (2,), {}), features, labels)
        muted = _trained(_job(APFED_R, (2, 3), {"party_weights": {"3": 0}}), features, labels)
        assert muted.step_losses == without.step_losses

    def test_a_positive_weight_does_change_training(self) -> None:
        """The control: with λ = 1 the passive parties move the active party's model."""
        features, labels = _data()
        alone = _trained(_job(APFED_R, (), {"weight": 0.0}), features, labels)
        helped = _trained(_job(APFED_R, (2, 3), {"weight": 1.0}), features, labels)
        assert helped.step_losses[0] == alone.step_losses[0]  # same start: same seed, same first batch
        assert helped.step_losses[1:] != alone.step_losses[1:]
