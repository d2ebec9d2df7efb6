"""The settings of issue 16 read and checked without any server: factories, ``[models]``, ``[compute]``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from vflalgorithms.factories import ModelSlot, check_factories
from vflcore.errors import ConfigError
from vflcore.runtime import daemon
from vflcore.runtime.config import client_config_from, server_config_from
from vflserver.plan.document import plan_from_document

SLOTS = {"top_factory": ModelSlot("the top model", (48, 10), (4, 48), (4, 10))}


def _client(extra: dict[str, Any]) -> dict[str, Any]:
    return {"client": {"party": 2}, "data": {"path": "party2.csv"}, **extra}


def _job(factories: dict[str, Any] | None = None, **job: Any) -> dict[str, Any]:
    """A job document for SplitNN (``job`` overrides ``[job]``), with ``factories`` as its ``[model]`` table."""
    return {"job": {"algorithm": "splitnn", "passive_parties": [2, 3], **job}, "model": factories or {}}


class TestCompute:
    @pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:3"])
    def test_accepted_forms(self, device: str) -> None:
        assert client_config_from(_client({"compute": {"device": device}})).settings.device == device
        assert server_config_from({"data": {"path": "p.csv"}, "compute": {"device": device}}).settings.device == device

    def test_default_is_cpu(self) -> None:
        assert client_config_from(_client({})).settings.device == "cpu"

    @pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "cpu:0", "CUDA"])
    def test_other_forms_are_refused_naming_the_key(self, device: str) -> None:
        with pytest.raises(ConfigError, match=r"\[compute\] device = .*give \"cpu\", \"cuda\" or \"cuda:N\""):
            client_config_from(_client({"compute": {"device": device}}))

    def test_an_unknown_key_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"\[compute\] has no key 'gpus'"):
            client_config_from(_client({"compute": {"gpus": 2}}))

    def test_cpu_always_passes_the_start_check(self) -> None:
        daemon.check_device("cpu")

    @pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU")
    def test_cuda_without_a_gpu_fails_the_start_check(self) -> None:
        with pytest.raises(ConfigError, match="no usable CUDA GPU"):
            daemon.check_device("cuda:0")


class TestPassiveModels:
    def test_the_models_table_is_read(self) -> None:
        config = client_config_from(_client({"models": {"wide": "mymodels:wide", "conv": "mymodels:conv"}}))
        assert config.models == {"wide": "mymodels:wide", "conv": "mymodels:conv"}

    def test_an_entry_that_is_not_a_factory_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"\[models\] wide = 3; give a factory"):
            client_config_from(_client({"models": {"wide": 3}}))

    def test_a_job_names_a_model_for_all_and_per_party(self) -> None:
        plan = plan_from_document(_job(model="small", models={"3": "conv"}), default_join_timeout_s=1)
        assert plan.models == {2: "small", 3: "conv"}

    def test_no_name_leaves_every_party_its_default(self) -> None:
        assert plan_from_document(_job(), default_join_timeout_s=1).models == {}

    def test_a_model_for_a_party_outside_the_job_is_refused(self) -> None:
        document = _job()
        document["job"]["models"] = {"1": "conv"}
        with pytest.raises(ConfigError, match=r"\[job.models\] 1: not a passive party"):
            plan_from_document(document, default_join_timeout_s=1)


class TestActiveFactories:
    def test_the_plan_keeps_the_factories(self) -> None:
        plan = plan_from_document(_job({"top_factory": "m:top"}), default_join_timeout_s=1)
        assert plan.factories == {"top_factory": "m:top"}

    @pytest.mark.parametrize(("algorithm", "key"), [("splitnn", "head_factory"), ("vimadmm", "top_factory")])
    def test_a_key_the_algorithm_does_not_take_is_refused_before_any_import(self, algorithm: str, key: str) -> None:
        document = _job({key: "not.imported:anything"}, algorithm=algorithm)
        with pytest.raises(ConfigError, match=rf"\[model\] {key}: {algorithm} does not take this model"):
            plan_from_document(document, default_join_timeout_s=1)

    def test_an_unknown_model_key_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"\[model\] has no key 'top_factroy'"):
            plan_from_document(_job({"top_factroy": "m:top"}), default_join_timeout_s=1)

    def test_a_good_factory_passes_the_probe(self) -> None:
        check_factories({"top_factory": "vfltesting.models:mlp_top"}, "splitnn", ("top_factory",), SLOTS)

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("vfltesting.models:one_too_wide", r"returns \[4, 11\]; the top model must return shape \[4, 10\]"),
            ("vfltesting.models:not_a_model", "expected a torch.nn.Module"),
            ("vfltesting.models:missing", "has no attribute 'missing'"),
            ("tests.nowhere:top", "cannot import module 'tests.nowhere'"),
        ],
    )
    def test_a_bad_factory_is_refused_naming_the_key(self, spec: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message) as refused:
            check_factories({"top_factory": spec}, "splitnn", ("top_factory",), SLOTS)
        assert str(refused.value).startswith("[model] top_factory")

    def test_an_own_bottom_without_own_features_is_refused(self) -> None:
        takes = ("own_bottom_factory", "top_factory")
        with pytest.raises(ConfigError, match="has no feature columns"):
            check_factories({"own_bottom_factory": "vfltesting.models:mlp_bottom"}, "splitnn", takes, SLOTS)
