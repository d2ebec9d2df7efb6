"""A throwaway PKI for tests and benchmarks, issued by the product's own tooling (what ``vfl-certs`` runs).

One project CA, the server's certificate, one certificate per party, per operator and per
inference caller, under one folder, so a test exercises exactly the issuance a user gets.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vflcore.security.certs import (
    create_ca,
    issue_caller_cert,
    issue_operator_cert,
    issue_party_cert,
    issue_self_signed_party_cert,
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


@dataclass(frozen=True)
class Strangers:
    """Party-2 look-alike certificates the project CA did not (validly) issue, each trusting the project CA."""

    self_signed: TlsFiles
    other_ca: TlsFiles
    expired: TlsFiles


def issue_strangers(root: Path, pki: Pki) -> Strangers:
    """A self-signed, a foreign-CA and an expired party-2 certificate under ``root``, for negative tests."""
    root.mkdir(parents=True, exist_ok=True)
    issue_self_signed_party_cert(root, 2, "self-signed")
    other = root / "other-ca"
    other.mkdir(exist_ok=True)
    create_ca(other, common_name="some-other-ca")
    issue_party_cert(root, load_ca(other), 2, name="other-ca-party-2")
    now = dt.datetime.now(dt.UTC)
    issue_party_cert(
        root,
        load_ca(pki.root),
        2,
        name="expired-party-2",
        not_valid_before=now - dt.timedelta(days=30),
        not_valid_after=now - dt.timedelta(days=1),
    )

    def files(stem: str) -> TlsFiles:
        # The clients trust the project CA, so that any rejection is the server's doing, not theirs.
        return TlsFiles(ca=pki.ca, cert=root / f"{stem}.pem", key=root / f"{stem}.key")

    return Strangers(
        self_signed=files("self-signed"), other_ca=files("other-ca-party-2"), expired=files("expired-party-2")
    )
