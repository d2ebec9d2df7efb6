"""The SplitNN digits run that three of these modules check, trained once per test process.

``test_reference_equivalence`` holds it to the in-process reference, ``test_wire_codecs`` takes it
as the fp32 run its lossy codecs are measured against, and ``test_client_importance`` checks that
SplitNN writes no importance report. The three files go to one xdist worker (``SAME_WORKER`` in
``tests/conftest.py``), so the job runs once in the suite: it cost about 2.7 CPU-s in each of
``test_wire_codecs`` and ``test_reference_equivalence``, and 1.7 as ``test_client_importance``'s
1-epoch job (one process, 2026-11-29).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from vfltesting.equivalence import Comparison, compare
from vfltesting.jobs import REFERENCE_JOB
from vfltesting.pki import Pki


@pytest.fixture(scope="session")
def splitnn_digits(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Comparison]:
    """``REFERENCE_JOB`` (SplitNN on digits, 4 epochs, wire codec fp32) federated over mTLS and by the reference,
    with one torch thread as the modules' ``one_torch_thread`` gives them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = compare(REFERENCE_JOB, digits_data, pki, tmp_path_factory.mktemp("splitnn-digits"))
    finally:
        torch.set_num_threads(before)
    yield run
