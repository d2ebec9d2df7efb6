"""APFed-R and APFed-C over real gRPC and mTLS: same numbers as the in-process reference, and a model
the active party serves alone.

One digits job per variant (server and two passive parties in this process, servers on port 0):
every step's L_A must agree with ``vflalgorithms.apfed.reference`` within 1e-5, the held-out accuracy
must reach the stated bar, evaluation must not touch any passive party, and the exported
standalone artifact must reproduce the server's predictions with no federation at all.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from vflclient import read_party_csv
from vflcore.errors import ConfigError
from vflserver.inference.artifact import FEATURES, LABEL, PROBABILITIES
from vflserver.inference.onnx_model import OnnxServable
from vflserver.plan.job_plan import JobPlan
from vflserver.training.active_party import ActiveParty
from vfltesting.equivalence import Comparison, assert_same_steps, compare
from vfltesting.jobs import REFERENCE_JOB
from vfltesting.pki import Pki

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]

# The reference test's digits job (seed 7, 4 epochs of 15 batches of 64, Adam 0.003). The active
# party predicts from its own top three image rows only (row 0 is nearly blank), so the bar is
# far below the all-party models': after 12 epochs APFed-R reached 0.6496 and APFed-C 0.6795 on the
# 234 held-out digits (bar 0.62); after these 4, 0.530 and 0.526. The bar is a check that the model
# learned from the active party's rows (chance is 0.1), not a benchmark (that is `make bench-apfed`),
# so it sits below both. 4 epochs, not 12, cut the module's CPU from 13.7 to 5.8 CPU-s.
APFED_ACCURACY_BAR = 0.45


@pytest.fixture(scope="module", params=["apfed_r", "apfed_c"])
def run(
    request: pytest.FixtureRequest, pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> Comparison:
    job = replace(REFERENCE_JOB, job_id=f"{request.param}-digits", algorithm=request.param)
    return compare(job, digits_data, pki, tmp_path_factory.mktemp(job.job_id))


def test_every_step_matches_the_reference(run: Comparison) -> None:
    """L_A of each of the 60 steps agrees with the in-process APFed within 1e-5."""
    assert_same_steps(run)


def test_reaches_the_accuracy_bar_predicting_alone(run: Comparison) -> None:
    assert run.federated.final_metrics["accuracy"] >= APFED_ACCURACY_BAR, run.federated.final_metrics


def test_evaluation_and_inference_ask_no_passive_party(run: Comparison) -> None:
    """Only training moves bytes: no passive party is asked for anything at evaluation or inference."""
    for party, phases in run.federated.wire.items():
        asked = {phase: n for phase, n in phases.items() if not phase.startswith(("train", "psi"))}
        assert not any(sum(d.values()) for d in asked.values()), (party, asked)


def test_standalone_artifact_reproduces_the_server(run: Comparison, digits_data: Path) -> None:
    """The artifact, loaded with nothing else, predicts what the trained server half predicts."""
    assert run.federated.artifact is not None and run.federated.artifact.is_file()
    assert run.federated.artifact.name == "model.onnx"
    servable = OnnxServable(run.federated.artifact)
    table = read_party_csv(digits_data / "party1.csv", label_column="label")
    assert servable.inputs[0].shape == (-1, table.features.shape[1])
    rows = run.test_rows
    expected = run.algorithm.predict(rows, {})
    by_id = {str(i): n for n, i in enumerate(table.ids)}
    aligned_ids = run.reference.ids
    assert aligned_ids is not None
    features = np.stack([table.features[by_id[str(aligned_ids[r])]] for r in rows]).astype(np.float32)
    out = servable.predict({FEATURES: features})
    assert np.array_equal(out[LABEL], expected.argmax(dim=1).numpy())
    assert np.allclose(out[PROBABILITIES], torch.softmax(expected, dim=1).numpy(), atol=1e-6)


def test_a_labels_only_active_party_is_refused_before_training(digits_data: Path) -> None:
    """APFed predicts from the active party's own features, so a file without any is a config error."""
    table = read_party_csv(digits_data / "party1.csv", label_column="label", feature_columns=())
    with pytest.raises(ConfigError, match="needs feature columns on the active party"):
        ActiveParty(JobPlan(replace(REFERENCE_JOB, algorithm="apfed_c")), table)
