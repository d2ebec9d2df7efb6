"""Tests for vflcore.ml.models: MLP layout, factory loading, optimizers and seeded construction."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vflcore.job.spec import JobSpec
from vflcore.ml.models import build_seeded, job_optimizer, load_factory, make_optimizer, mlp, seed_dropout

NOT_CALLABLE = 42


def tiny_model() -> nn.Module:
    return nn.Linear(3, 2)


class TestMlp:
    def test_layer_layout(self) -> None:
        """Hidden widths become Linear+ReLU blocks and the last Linear has no activation."""
        model = mlp(5, [8, 4], 3)
        kinds = [type(layer) for layer in model]
        assert kinds == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
        assert [(m.in_features, m.out_features) for m in model if isinstance(m, nn.Linear)] == [
            (5, 8),
            (8, 4),
            (4, 3),
        ]

    def test_no_hidden_layers_is_linear(self) -> None:
        """With no hidden widths the model is a single Linear layer."""
        model = mlp(4, [], 2)
        assert len(model) == 1 and isinstance(model[0], nn.Linear)

    def test_output_can_be_negative(self) -> None:
        """The final layer is not followed by a ReLU, so outputs may be negative."""
        model = build_seeded(lambda: mlp(4, [16], 8), seed=0)
        out = model(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)))
        assert out.shape == (64, 8) and (out < 0).any()

    def test_dropout_follows_every_hidden_block(self) -> None:
        """dropout > 0 puts a Dropout after each hidden ReLU, never after the output layer."""
        model = mlp(5, [8, 4], 3, dropout=0.5)
        kinds = [type(layer) for layer in model]
        assert kinds == [nn.Linear, nn.ReLU, nn.Dropout, nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]

    def test_dropout_is_off_in_eval_mode(self) -> None:
        """In eval mode the dropout model computes what the same weights without dropout compute."""
        plain = build_seeded(lambda: mlp(4, [16], 3), seed=1)
        dropped = build_seeded(lambda: mlp(4, [16], 3, dropout=0.5), seed=1)
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(2))
        dropped.eval()
        torch.testing.assert_close(dropped(x), plain(x))

    @pytest.mark.parametrize("rate", [1.0, -0.1])
    def test_rejects_dropout_outside_unit_interval(self, rate: float) -> None:
        with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
            mlp(4, [8], 2, dropout=rate)

    def test_rejects_non_positive_width(self) -> None:
        """Zero-width layers are a configuration error."""
        with pytest.raises(ValueError, match="widths must be positive"):
            mlp(4, [0], 2)


class TestLoadFactory:
    def test_loads_function(self) -> None:
        """A 'module:function' spec resolves to that function."""
        assert load_factory("vflcore.ml.models:mlp") is mlp

    def test_loads_dotted_attribute(self) -> None:
        """A dotted attribute after the colon is followed, e.g. a class in a module."""
        assert load_factory("torch.nn:Linear") is nn.Linear

    @pytest.mark.parametrize("spec", ["vflcore.ml.models", "vflcore.ml.models:", ":mlp", "a:b:c"])
    def test_bad_format(self, spec: str) -> None:
        """Specs not shaped like 'package.module:function' are rejected with the expected form."""
        with pytest.raises(ValueError, match=r"must look like 'package\.module:function'"):
            load_factory(spec)

    def test_module_not_importable(self) -> None:
        """An unknown module is named, with advice about installing it or PYTHONPATH."""
        with pytest.raises(ValueError, match=r"cannot import module 'no_such_module_vfl'.*PYTHONPATH"):
            load_factory("no_such_module_vfl:build")

    def test_attribute_missing(self) -> None:
        """A missing attribute is named along with its module."""
        with pytest.raises(ValueError, match=r"module 'vflcore\.ml\.models' has no attribute 'nope'"):
            load_factory("vflcore.ml.models:nope")

    def test_not_callable(self) -> None:
        """An attribute that cannot be called is rejected with its type."""
        with pytest.raises(ValueError, match="'NOT_CALLABLE' is a int, not callable"):
            load_factory(f"{__name__}:NOT_CALLABLE")


class TestMakeOptimizer:
    def test_sgd_has_momentum(self) -> None:
        """'sgd' gives SGD with momentum 0.9 and the given learning rate."""
        opt = make_optimizer("sgd", nn.Linear(2, 2).parameters(), lr=0.1)
        assert isinstance(opt, torch.optim.SGD)
        assert opt.param_groups[0]["momentum"] == 0.9 and opt.param_groups[0]["lr"] == 0.1

    def test_adam_case_insensitive(self) -> None:
        """'Adam' in any case gives Adam."""
        assert isinstance(make_optimizer("Adam", nn.Linear(2, 2).parameters(), lr=1e-3), torch.optim.Adam)

    def test_unknown_name_lists_choices(self) -> None:
        """An unknown optimizer name is rejected with the available choices."""
        with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'; choose one of adam, sgd"):
            make_optimizer("rmsprop", nn.Linear(2, 2).parameters(), lr=0.1)

    @pytest.mark.parametrize("name", ["sgd", "adam"])
    def test_weight_decay_reaches_the_optimizer(self, name: str) -> None:
        """The L2 penalty is set on the optimizer, and the default is none."""
        assert make_optimizer(name, nn.Linear(2, 2).parameters(), lr=0.1).param_groups[0]["weight_decay"] == 0.0
        opt = make_optimizer(name, nn.Linear(2, 2).parameters(), lr=0.1, weight_decay=1e-4)
        assert opt.param_groups[0]["weight_decay"] == 1e-4

    def test_weight_decay_shrinks_weights_with_zero_gradient(self) -> None:
        """With a zero loss gradient, one SGD step scales every weight by (1 - lr * weight_decay)."""
        layer = nn.Linear(3, 2)
        before = layer.weight.detach().clone()
        opt = make_optimizer("sgd", layer.parameters(), lr=0.1, weight_decay=0.5)
        (layer.weight.sum() * 0.0).backward()
        opt.step()
        torch.testing.assert_close(layer.weight.detach(), before * (1 - 0.1 * 0.5))

    def test_negative_weight_decay(self) -> None:
        with pytest.raises(ValueError, match="weight decay must be zero or positive"):
            make_optimizer("sgd", nn.Linear(2, 2).parameters(), lr=0.1, weight_decay=-1.0)

    def test_job_optimizer_uses_the_job(self) -> None:
        """A party's optimizer takes name, learning rate and weight decay from the job."""
        job = JobSpec(job_id="j", optimizer="sgd", learning_rate=0.05, weight_decay=1e-4)
        group = job_optimizer(job, nn.Linear(2, 2).parameters()).param_groups[0]
        assert (group["lr"], group["weight_decay"], group["momentum"]) == (0.05, 1e-4, 0.9)

    def test_non_positive_learning_rate(self) -> None:
        """A learning rate of zero or less is rejected."""
        with pytest.raises(ValueError, match="learning rate must be positive"):
            make_optimizer("sgd", nn.Linear(2, 2).parameters(), lr=0.0)


class TestSeedDropout:
    def test_same_job_seed_same_masks(self) -> None:
        """Seeding from the job gives the same dropout masks each time, and another seed other masks."""
        drop = nn.Dropout(0.5)
        ones = torch.ones(64)
        seed_dropout(JobSpec(job_id="j", seed=3))
        first = drop(ones)
        seed_dropout(JobSpec(job_id="j", seed=3))
        assert torch.equal(drop(ones), first)
        seed_dropout(JobSpec(job_id="j", seed=4))
        assert not torch.equal(drop(ones), first)


class TestBuildSeeded:
    def test_same_seed_same_weights(self) -> None:
        """Building twice with one seed gives identical weights; another seed differs."""
        a = build_seeded(tiny_model, seed=5).state_dict()
        b = build_seeded(tiny_model, seed=5).state_dict()
        c = build_seeded(tiny_model, seed=6).state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not torch.equal(a["weight"], c["weight"])

    def test_global_rng_untouched(self) -> None:
        """The global torch RNG continues as if no model had been built."""
        torch.manual_seed(123)
        expected = torch.rand(3)
        torch.manual_seed(123)
        build_seeded(tiny_model, seed=0)
        assert torch.equal(torch.rand(3), expected)

    def test_rejects_non_module(self) -> None:
        """A factory that returns something other than a Module is a TypeError."""
        with pytest.raises(TypeError, match=r"expected a torch\.nn\.Module"):
            build_seeded(lambda: "model", seed=0)  # type: ignore[arg-type, return-value]
