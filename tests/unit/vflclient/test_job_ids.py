"""A passive party refuses a job id from the server that is not a plain name: it would become its folder."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import pytest

from vflclient import Connection, PassiveParty
from vflcore.data.tables import PartyTable
from vflcore.errors import JoinRejected
from vflcore.runtime.config import ClientSettings


@pytest.mark.parametrize("job_id", ["../outside", "a/b", ".hidden"])
def test_an_offered_job_id_that_is_a_path_is_refused_before_anything_is_written(job_id: str, tmp_path: Path) -> None:
    table = PartyTable(np.array(["a", "b"]), np.zeros((2, 1), np.float32), ("x",), None, tmp_path / "p.csv")
    party = PassiveParty(2, table, ClientSettings(run_dir=tmp_path / "runs"))
    with pytest.raises(JoinRejected, match=r"the server's job id .* is not allowed"):
        party.run(cast(Connection, None), job_id=job_id)  # refused before the connection is used
    assert not (tmp_path / "runs").exists()
