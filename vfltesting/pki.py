"""A throwaway PKI for tests and benchmarks, issued by the product's own tooling (what ``vfl-certs`` runs).

One project CA, the server's certificate, one certificate per party, per operator and per
inference caller, under one folder, so a test exercises exactly the issuance a user gets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vflcore.security.certs import (
    create_ca,
    issue_caller_cert,
    issue_operator_cert,
    issue_party_cert,
    issue_server_cert,
    load_ca,
)
from vflcore.security.tls import TlsFiles


@dataclass(frozen=True)
class Pki:
    """The files of one project CA with the server's, the parties', operators' and callers' certificates."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    def server_files(self) -> TlsFiles:
        return TlsFiles(ca=self.ca, cert=self.root / "server.pem", key=self.root / "server.key")

    def party_files(self, party: int) -> TlsFiles:
        return TlsFiles(ca=self.ca, cert=self.root / f"party-{party}.pem", key=self.root / f"party-{party}.key")

    def operator_files(self, name: str) -> TlsFiles:
        return self._named_files(name)

    def caller_files(self, name: str) -> TlsFiles:
        return self._named_files(name)

    def _named_files(self, name: str) -> TlsFiles:
        # Operators and callers share the file layout of `vfl-certs operator|caller NAME`.
        return TlsFiles(ca=self.ca, cert=self.root / f"{name}.pem", key=self.root / f"{name}.key")


def issue_pki(
    root: Path, parties: Iterable[int], operators: Iterable[str] = ("alice",), callers: Iterable[str] = ()
) -> Pki:
    """Create a CA in ``root`` and issue the server's certificate and one for each party, operator and caller."""
    create_ca(root)
    ca = load_ca(root)
    issue_server_cert(root, ca)
    for party in parties:
        issue_party_cert(root, ca, party)
    for operator in operators:
        issue_operator_cert(root, ca, operator)
    for caller in callers:
        issue_caller_cert(root, ca, caller)
    return Pki(root)
