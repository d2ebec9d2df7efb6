"""The certificate tests' own project CA, made fresh in each test's folder as ``vfl-certs init`` makes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vflcore.security.certs import CertificateAuthority, create_ca, load_ca


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    """A new CA under ``tmp_path``, loaded back from its files."""
    create_ca(tmp_path)
    return load_ca(tmp_path)
