"""Tests for vflcore.models: MLP layout, factory loading, optimizers and seeded construction."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vflcore.models import build_seeded, load_factory, make_optimizer, mlp

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

    def test_rejects_non_positive_width(self) -> None:
        """Zero-width layers are a configuration error."""
        with pytest.raises(ValueError, match="widths must be positive"):
            mlp(4, [0], 2)


class TestLoadFactory:
    def test_loads_function(self) -> None:
        """A 'module:function' spec resolves to that function."""
        assert load_factory("vflcore.models:mlp") is mlp

    def test_loads_dotted_attribute(self) -> None:
        """A dotted attribute after the colon is followed, e.g. a class in a module."""
        assert load_factory("torch.nn:Linear") is nn.Linear

    @pytest.mark.parametrize("spec", ["vflcore.models", "vflcore.models:", ":mlp", "a:b:c"])
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
        with pytest.raises(ValueError, match=r"module 'vflcore\.models' has no attribute 'nope'"):
            load_factory("vflcore.models:nope")

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

    def test_non_positive_learning_rate(self) -> None:
        """A learning rate of zero or less is rejected."""
        with pytest.raises(ValueError, match="learning rate must be positive"):
            make_optimizer("sgd", nn.Linear(2, 2).parameters(), lr=0.0)


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
