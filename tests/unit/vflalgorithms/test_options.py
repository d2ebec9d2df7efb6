"""Algorithm options: defaults filled in, unknown keys and bad values refused with the key named."""

from __future__ import annotations

import pytest

from vflalgorithms.options import algorithm_options, job_options
from vflcore.errors import ConfigError
from vflcore.job.spec import JobSpec


def test_defaults_fill_what_the_config_omits() -> None:
    assert algorithm_options("fedbcd", {}) == {"local_steps": 5, "micro_batches": 1, "pipeline_depth": 0}
    assert job_options(JobSpec("j", algorithm="fedbcd", algorithm_options={"local_steps": 2}))["local_steps"] == 2


def test_unknown_key_is_refused_with_the_options_that_exist() -> None:
    with pytest.raises(
        ConfigError,
        match=r"\[algorithm\] q is not an option of 'fedbcd' "
        r"\(its options: local_steps, micro_batches, pipeline_depth\)",
    ):
        algorithm_options("fedbcd", {"q": 3})


def test_vimsgd_takes_no_options() -> None:
    with pytest.raises(ConfigError, match="its options: none"):
        algorithm_options("vimsgd", {"local_steps": 2})


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"delay": "sometimes"}, "choose none, round_robin or random"),
        ({"delay_s": 0}, "delay_s must be a positive number"),
        ({"delay_probability": 1.5}, r"delay_probability must be in \[0, 1\]"),
        ({"max_staleness": 0}, "max_staleness must be a whole number"),
    ],
)
def test_async_settings_are_checked(given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        algorithm_options("async", given)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True])
def test_local_steps_must_be_a_positive_whole_number(bad: object) -> None:
    with pytest.raises(ConfigError, match="local_steps must be a whole number"):
        algorithm_options("fedbcd", {"local_steps": bad})
