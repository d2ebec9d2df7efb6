"""The SDK's public surface is deliberate: this test changes whenever ``__all__`` does."""

from __future__ import annotations

import vflclient

EXPECTED = [
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
