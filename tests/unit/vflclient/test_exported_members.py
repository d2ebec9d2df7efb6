"""The SDK's public surface is deliberate: this test changes whenever ``__all__`` does."""

from __future__ import annotations

import subprocess
import sys

import pytest

import vflclient
from vfltesting.paths import REPO_ROOT as ROOT

EXPECTED = [
    "ClientSettings",
    "ConfigError",
    "Connection",
    "DataError",
    "DuplicateJob",
    "InferenceClient",
    "Job",
    "JobAborted",
    "JobClient",
    "JobEvent",
    "JobNotFound",
    "JobSpec",
    "JobStateError",
    "JoinRejected",
    "ModelFactory",
    "ModelNotFound",
    "Overloaded",
    "PartyPrivacy",
    "PartyTable",
    "PassiveParty",
    "PermissionDenied",
    "RunResult",
    "ServerUnavailable",
    "TensorRejected",
    "TlsFiles",
    "VflError",
    "read_party_csv",
]


class TestExportedMembers:
    def test_all_is_exactly_the_documented_list(self) -> None:
        """``vflclient.__all__`` lists exactly the public names, sorted."""
        assert vflclient.__all__ == EXPECTED

    def test_every_exported_name_exists(self) -> None:
        """Each name in ``__all__`` is importable from the package."""
        for name in vflclient.__all__:
            assert getattr(vflclient, name) is not None, name

    def test_no_other_public_module_attributes(self) -> None:
        """Anything public that is not in ``__all__`` is a submodule, not an accidental export."""
        public = {n for n in dir(vflclient) if not n.startswith("_")}
        submodules = {
            "algorithms",
            "alignment",
            "cli",
            "connection",
            "daemon",
            "inference",
            "jobs_cli",
            "passive_party",
        }
        assert public - set(EXPECTED) <= submodules


class TestWhatImportingCosts:
    def test_the_operator_cli_imports_neither_torch_nor_pandas(self) -> None:
        """``vfl-jobs`` (and a script that only uses JobClient) starts without the training stack.

        When ``vflclient`` imported every exported name at once, each ``vfl-jobs`` call spent 2.7 s
        importing torch before it did anything (0.3 s now, measured 2026-11-28).
        """
        code = "import sys, vflclient.jobs_cli; print(sorted({'torch', 'pandas', 'pyarrow'} & set(sys.modules)))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
        assert out.stdout.strip() == "[]", out

    def test_a_name_imported_when_used_is_the_module_s_own(self) -> None:
        from vflclient._passive_party import PassiveParty, RunResult
        from vflcore.data.tables import read_party_csv

        assert (vflclient.PassiveParty, vflclient.RunResult) == (PassiveParty, RunResult)
        assert vflclient.read_party_csv is read_party_csv
        assert set(vflclient.__all__) <= set(dir(vflclient))

    def test_an_unknown_name_is_an_attribute_error(self) -> None:
        with pytest.raises(AttributeError, match="'vflclient' has no attribute 'PasiveParty'"):
            _ = vflclient.PasiveParty  # type: ignore[attr-defined]
