"""A throwaway PKI for tests and benchmarks, issued by the product's own tooling (what ``vfl-certs`` runs).

One project CA, the server's certificate and one certificate per party, under one folder, so a
test exercises exactly the issuance a user gets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vflcore.security.certs import create_ca, issue_party_cert, issue_server_cert, load_ca
from vflcore.security.tls import TlsFiles


@dataclass(frozen=True)
class Pki:
    """The files of one project CA with a server certificate and party certificates."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    def server_files(self) -> TlsFiles:
        return TlsFiles(ca=self.ca, cert=self.root / "server.pem", key=self.root / "server.key")

    def party_files(self, party: int) -> TlsFiles:
        return TlsFiles(ca=self.ca, cert=self.root / f"party-{party}.pem", key=self.root / f"party-{party}.key")


def issue_pki(root: Path, parties: Iterable[int]) -> Pki:
    """Create a CA in ``root`` and issue the server's certificate and one for each of ``parties``."""
    create_ca(root)
    ca = load_ca(root)
    issue_server_cert(root, ca)
    for party in parties:
        issue_party_cert(root, ca, party)
    return Pki(root)
