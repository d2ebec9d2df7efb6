"""Unit tests compute with one torch thread, so a bit-for-bit comparison holds on a busy machine.

Seen here: ``test_adptvfedconv_reference::test_same_seed_same_predictions`` (two identical runs in
one process and thread) failed once while another test suite loaded both cores, and passed alone.
The likely cause, not proven: with more than one intra-op thread, MKL may choose how many threads
a GEMM uses from the machine's load (MKL_DYNAMIC), which changes the reduction order and so the
rounding. With one thread there is nothing to choose.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread_for_unit_tests() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
