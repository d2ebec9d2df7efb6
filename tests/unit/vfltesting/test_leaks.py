"""Tests for vfltesting.leaks: the log scan finds every planted form of a private value, and passes real log lines."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from vflcore.data.tables import PartyTable
from vflcore.runtime.logs import configure_logging, get_logger
from vfltesting.leaks import PartySecrets, find_leaks, party_secrets, printed_forms

pytestmark = pytest.mark.usefixtures("restore_logging")

FEATURES = np.array(
    [[731.2458, 104.90731, 999.12345], [250.5, 612.03125, 187.77777], [333.3333, 444.4444, 555.5555]], dtype=np.float32
)


def _secrets() -> list[PartySecrets]:
    table = PartyTable(
        ids=np.array(["rid-00007", "rid-00042", "müller.jürgen.0000006@bank.example.de"], dtype=object),
        features=FEATURES,
        feature_names=("a", "b", "c"),
        labels=None,
        source=Path("party2.csv"),
    )
    return [party_secrets(2, table)]


def _scan(line: str) -> list[str]:
    return [leak.what for leak in find_leaks([line], _secrets(), "test.log")]


class TestFindLeaks:
    @pytest.mark.parametrize(
        "line",
        [
            '{"event": "row_rejected", "id": "rid-00042"}',
            f'{{"event": "bad_value", "value": {float(FEATURES[0, 1])!r}}}',
            f"value {FEATURES[1, 2]} out of range",
            f"features {FEATURES[0]!r}",
            f"features {FEATURES[1]}",
            f"row {FEATURES[0].tolist()}",
            f"embedding {torch.from_numpy(FEATURES)}",
        ],
        ids=["id", "float64-repr", "numpy-scalar", "numpy-repr", "numpy-str", "list", "torch"],
    )
    def test_each_printed_form_of_a_private_value_is_found(self, line: str) -> None:
        """An ID, one feature value in any print form, and a row printed by numpy, Python or torch are each found."""
        assert _scan(line), line

    @pytest.mark.parametrize(
        "values", [np.array([0.0012, -0.25, 3.5e-07]), torch.tensor([[0.125, -1.5], [2.0, 1e-3]])], ids=str
    )
    def test_a_tensor_nobody_knows_in_advance_is_found(self, values: object) -> None:
        """Gradients and embeddings are not known to the test: any printed array of them is found anyway."""
        assert _scan(f"gradient {values}")
        assert _scan(f"gradient {values!r}")

    def test_real_log_lines_pass(self) -> None:
        """Lines the daemons write (metrics, counts, times, digests) hold no private value."""
        out = io.StringIO()
        configure_logging(json=True, stream=out)
        log = get_logger("vfl.test")
        log.info("epoch_done", train_loss=0.7312458, test_loss=104.9, accuracy=0.75, round=3, job="rid")
        log.info("psi_matched", own_ids=200, pairwise={"2": 200, "3": 187}, intersection=187)
        log.info("aligned", rows=187, seconds=0.08, checkpoints=["e0001-b0003"])
        assert out.getvalue().count("\n") == 3
        assert find_leaks(out.getvalue().splitlines(), _secrets(), "test.log") == []

    def test_a_non_ascii_id_in_a_json_log_is_found(self) -> None:
        """The JSON log escapes ü as \\u00fc: the scan finds the ID in that form too."""
        out = io.StringIO()
        configure_logging(json=True, stream=out)
        get_logger("vfl.test").warning("row_rejected", id="müller.jürgen.0000006@bank.example.de")
        assert "\\u00fc" in out.getvalue()
        assert [leak.what for leak in find_leaks(out.getvalue().splitlines(), _secrets(), "test.log")] == [
            "party 2's ID 'müller.jürgen.0000006@bank.example.de'"
        ]

    def test_a_value_inside_a_longer_number_is_not_counted(self) -> None:
        """731.2458 inside 1731.24589 is another number, not the feature value."""
        assert _scan("took 1731.24589 s") == []


class TestPrintedForms:
    def test_numpy_torch_and_python_forms(self) -> None:
        """The forms are numpy's shortest, Python's float64 repr and torch's four decimals."""
        forms = printed_forms(731.2458)
        assert str(np.float32(731.2458)) in forms and f"{731.2458:.4f}" in forms
        assert repr(float(np.float32(731.2458))) in forms
