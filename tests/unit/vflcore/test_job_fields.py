"""The job's settings are listed once, in ``JobSpec``: the wire and the config file follow its fields."""

from __future__ import annotations

import tomllib
from dataclasses import fields

from vflcore.job.document import job_from_document
from vflcore.job.privacy import PrivacySpec
from vflcore.job.spec import JobSpec, settable_fields
from vflcore.proto import federation_pb2 as pb
from vflcore.wire import serde


def test_every_field_has_a_proto_field_of_the_same_name() -> None:
    """A new JobSpec field without its proto field (or the reverse) fails here, not on the wire."""
    assert {f.name for f in fields(JobSpec)} == set(pb.JobSpec.DESCRIPTOR.fields_by_name)


def test_every_field_survives_the_wire() -> None:
    """A job with no default value left crosses the wire unchanged."""
    job = JobSpec(
        job_id="j",
        algorithm="fedbcd",
        task="regression",
        seed=3,
        batch_size=7,
        epochs=2,
        embedding_dim=5,
        bottom_hidden=(9, 4),
        optimizer="sgd",
        learning_rate=0.5,
        weight_decay=0.25,
        top_optimizer="plain_sgd",
        top_learning_rate=0.125,
        top_weight_decay=0.0,
        bottom_optimizer="adam",
        bottom_learning_rate=0.0625,
        bottom_weight_decay=0.5,
        test_fraction=0.5,
        validation_fraction=0.25,
        patience=3,
        eval_every_rounds=9,
        num_rows=11,
        passive_parties=(2, 5),
        algorithm_options={"local_steps": 2},
        num_outputs=1,
        checkpoint_every_steps=40,
        wire_codec="bf16",
        wire_codec_up="int8",
        wire_codec_down="topk:0.5",
        privacy=PrivacySpec(label_defence="max_norm", embedding_clip=2.0, embedding_noise_multiplier=0.5),
    )
    assert {f.name for f in fields(JobSpec)} == set(vars(job))
    assert all(getattr(job, f.name) != f.default for f in fields(JobSpec) if f.name != "job_id")
    assert serde.job_from_proto(serde.job_to_proto(job)) == job


def test_every_configurable_field_is_read_from_the_job_table() -> None:
    """Each field but those the active party fills in is a ``[job]`` key of a job document."""
    settable = settable_fields()
    values = {
        "job_id": "x",
        "algorithm": "fedbcd",
        "task": "regression",
        "optimizer": "sgd",
        "top_optimizer": "plain_sgd",
        "bottom_optimizer": "adam",
        "wire_codec": "bf16",
        "wire_codec_up": "int8",
        "wire_codec_down": "fp16",
    }
    lines = []
    for f in settable:
        value = values.get(f.name)
        if value is not None:
            lines.append(f'{f.name} = "{value}"')
        elif isinstance(f.default, tuple):
            lines.append(f"{f.name} = [2, 3]")
        elif isinstance(f.default, float) or f.name.endswith(("_learning_rate", "_weight_decay")):
            lines.append(f"{f.name} = 0.125")
        else:
            lines.append(f"{f.name} = 6")
    job = job_from_document(tomllib.loads("[job]\n" + "\n".join(lines) + "\n"))
    assert job.job_id == "x" and job.task == "regression" and job.optimizer == "sgd"
    assert job.bottom_hidden == (2, 3) and job.passive_parties == (2, 3)
    assert job.learning_rate == job.weight_decay == job.test_fraction == 0.125
    assert job.optimizer_for("top") == ("plain_sgd", 0.125, 0.125) and job.optimizer_for("bottom")[0] == "adam"
    assert job.seed == job.batch_size == job.epochs == job.embedding_dim == job.checkpoint_every_steps == 6
    assert job.validation_fraction == 0.125 and job.patience == job.eval_every_rounds == 6
    assert (job.wire_codec, job.wire_codec_up, job.wire_codec_down) == ("bf16", "int8", "fp16")


def test_every_privacy_setting_survives_the_wire_and_the_table() -> None:
    """``[privacy]`` is read key by key from ``PrivacySpec``, and each key crosses the wire under its own name."""
    values = {
        "label_defence": "marvell",
        "marvell_sum_kl": 0.5,
        "gradient_noise": 2.0,
        "label_dp_epsilon": 3.0,
        "embedding_clip": 4.0,
        "embedding_noise_multiplier": 1.5,
        "dp_delta": 1e-6,
        "active_embedding_clip": 2.5,
        "active_embedding_noise_multiplier": 0.75,
        "noise_persistence": 0.5,
    }
    assert set(values) == {f.name for f in fields(PrivacySpec)} == set(pb.PrivacySpec.DESCRIPTOR.fields_by_name)
    toml = '[job]\njob_id = "p"\n[privacy]\n' + "".join(
        f'{k} = "{v}"\n' if isinstance(v, str) else f"{k} = {v}\n" for k, v in values.items()
    )
    job = job_from_document(tomllib.loads(toml))
    assert job.privacy == PrivacySpec(**values)
    assert serde.job_from_proto(serde.job_to_proto(job)) == job
    assert serde.job_from_proto(serde.job_to_proto(JobSpec("q"))).privacy == PrivacySpec()
