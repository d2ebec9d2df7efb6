"""A table whose labels cannot train the job is refused naming the file (found by the fuzz campaign, issue 41).

The campaign's "files" surface submitted a job whose active table held a label of -1: the refusal
said "classification labels must be non-negative integers" and named neither the file nor the
column, so an operator could not tell which of the server's datasets was wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vflcore.data.tables import read_party_csv
from vflcore.errors import DataError
from vflserver.plan.admission import check_models
from vflserver.plan.document import plan_from_document


@pytest.mark.parametrize("label", ["-1", "0.5"])
def test_labels_that_cannot_train_name_the_file(tmp_path: Path, label: str) -> None:
    path = tmp_path / "bank-2026.csv"
    rows = [f"jörg.müller+{i}@bank.example,{label if i == 3 else i % 2},{i / 7}" for i in range(40)]
    path.write_text("id,label,f0\n" + "\n".join(rows) + "\n", encoding="utf-8")
    plan = plan_from_document({"job": {"algorithm": "splitnn"}, "distill": {}}, default_join_timeout_s=1)
    table = read_party_csv(path, label_column="label")
    with pytest.raises(DataError, match=r"bank-2026\.csv: its label column cannot train a classification job"):
        check_models(plan, table)
