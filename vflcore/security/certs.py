"""Issue the project's certificates: one CA, the server's, and one per party, operator and caller.

Every key is EC P-256 and every signature SHA-256, so gRPC (BoringSSL), Python's ``ssl`` and
OpenSSL all accept the files without conversion. Private keys are written PKCS#8 PEM, mode 0600
from the moment the file exists, and never silently overwritten: a lost CA key means re-issuing
every certificate of the project.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vflcore.errors import CertsError as CertsError  # re-exported: defined in vflcore.errors
from vflcore.errors import KeyExistsError as KeyExistsError
from vflcore.security.identity import is_operator_name, operator_uri, party_common_name, party_uri

CA_CERT_FILE = "ca.pem"
CA_KEY_FILE = "ca.key"
SERVER_STEM = "server"

# Leaves are backdated a little so that a peer whose clock runs slightly behind still accepts them.
_CLOCK_SKEW = dt.timedelta(minutes=5)
_PUBLIC_MODE = 0o644
_PRIVATE_MODE = 0o600


@dataclass(frozen=True)
class IssuedCert:
    """Where one certificate and its private key were written."""

    cert_path: Path
    key_path: Path


@dataclass(frozen=True)
class CertificateAuthority:
    """The project CA, loaded into memory so that it can sign leaf certificates."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_path: Path


def create_ca(out_dir: Path, *, common_name: str = "vfl-ca", days: int = 3650, force: bool = False) -> IssuedCert:
    """Create the project CA in ``out_dir`` (``ca.pem``, ``ca.key``)."""
    issued = _paths(out_dir, "ca")
    _refuse_overwrite(issued, force)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before = _now() - _CLOCK_SKEW
    builder = (
        _base_builder(name, name, key.public_key(), not_before, not_before + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    cert = builder.sign(key, hashes.SHA256())
    _write_pair(issued, cert, key)
    return issued


def load_ca(out_dir: Path) -> CertificateAuthority:
    """Load ``ca.pem`` and ``ca.key`` from ``out_dir``, naming any missing file in the error."""
    cert_path, key_path = out_dir / CA_CERT_FILE, out_dir / CA_KEY_FILE
    for path in (cert_path, key_path):
        if not path.is_file():
            raise CertsError(f"{path} not found; run `vfl-certs init --out {out_dir}` to create the CA")
    cert = load_certificate(cert_path)
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise CertsError(f"cannot load {key_path} as an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertsError(f"{key_path} is not an EC private key; recreate the CA with `vfl-certs init --force`")
    if key.public_key().public_numbers() != _ec_public_key(cert, cert_path).public_numbers():
        raise CertsError(f"{key_path} does not belong to {cert_path}; restore the matching pair")
    return CertificateAuthority(cert=cert, key=key, cert_path=cert_path)


def issue_server_cert(
    out_dir: Path,
    ca: CertificateAuthority,
    *,
    dns_names: Sequence[str] = ("localhost",),
    ips: Sequence[str] = ("127.0.0.1",),
    days: int = 825,
    name: str = SERVER_STEM,
    not_valid_before: dt.datetime | None = None,
    not_valid_after: dt.datetime | None = None,
    force: bool = False,
) -> IssuedCert:
    """Issue the active party's TLS server certificate, valid exactly for the given names and IPs.

    Clients check the host they dial against these SANs, so they must list every name or address
    that passive parties put in ``--server``.
    """
    addresses = [ipaddress.ip_address(ip) for ip in ips]
    if not dns_names and not addresses:
        raise CertsError("a server certificate needs at least one --dns name or --ip address")
    issued = _paths(out_dir, name)
    _refuse_overwrite(issued, force)
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(a) for a in addresses]
    common_name = dns_names[0] if dns_names else str(addresses[0])
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days, not_valid_before, not_valid_after)
    builder = _leaf_builder(ca, common_name, key, not_before, not_after, ExtendedKeyUsageOID.SERVER_AUTH)
    cert = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(ca.key, hashes.SHA256())
    _write_pair(issued, cert, key)
    return issued


def issue_party_cert(
    out_dir: Path,
    ca: CertificateAuthority,
    party: int,
    *,
    days: int = 825,
    not_valid_before: dt.datetime | None = None,
    not_valid_after: dt.datetime | None = None,
    name: str | None = None,
    force: bool = False,
) -> IssuedCert:
    """Issue a party's client certificate: CN ``party-N`` and URI SAN ``vfl://party/N``.

    The server takes the caller's party id from this certificate, so whoever holds the key *is*
    party N; hand each key only to the operator of that party.
    """
    _check_party(party)
    issued = _paths(out_dir, name or party_common_name(party))
    _refuse_overwrite(issued, force)
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days, not_valid_before, not_valid_after)
    builder = _leaf_builder(ca, party_common_name(party), key, not_before, not_after, ExtendedKeyUsageOID.CLIENT_AUTH)
    san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(party_uri(party))])
    cert = builder.add_extension(san, critical=False).sign(ca.key, hashes.SHA256())
    _write_pair(issued, cert, key)
    return issued


def issue_caller_cert(
    out_dir: Path, ca: CertificateAuthority, name: str, *, days: int = 825, force: bool = False
) -> IssuedCert:
    """Issue an inference caller's client certificate: CN ``name``, no party identity.

    It lets an application call the inference endpoints when they require client certificates
    (``[serving] client_auth``). It carries no ``vfl://party/N`` SAN, so the federation server
    refuses it: a caller can ask for predictions but never join a job as a party.
    """
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("party-"):
        raise CertsError(f"caller name {name!r}: use letters, digits, '-', '_' or '.', and not a party-N name")
    issued = _paths(out_dir, name)
    _refuse_overwrite(issued, force)
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days, None, None)
    builder = _leaf_builder(ca, name, key, not_before, not_after, ExtendedKeyUsageOID.CLIENT_AUTH)
    cert = builder.sign(ca.key, hashes.SHA256())
    _write_pair(issued, cert, key)
    return issued


def issue_operator_cert(
    out_dir: Path, ca: CertificateAuthority, name: str, *, days: int = 825, force: bool = False
) -> IssuedCert:
    """Issue an operator's client certificate: CN ``name`` and URI SAN ``vfl://operator/<name>``.

    The server's Control API takes the operator, who submits, lists, watches and cancels jobs,
    from this certificate, and records it as the submitter of each job. It names no party, so the
    federation refuses it as one.
    """
    if not is_operator_name(name):
        raise CertsError(
            f"operator name {name!r}: use 1 to 64 ASCII letters, digits, '-', '_' or '.', starting with "
            "a letter or digit, and not a party-N name"
        )
    issued = _paths(out_dir, name)
    _refuse_overwrite(issued, force)
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days, None, None)
    builder = _leaf_builder(ca, name, key, not_before, not_after, ExtendedKeyUsageOID.CLIENT_AUTH)
    san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(operator_uri(name))])
    cert = builder.add_extension(san, critical=False).sign(ca.key, hashes.SHA256())
    _write_pair(issued, cert, key)
    return issued


def issue_self_signed_party_cert(out_dir: Path, party: int, name: str, *, force: bool = False) -> IssuedCert:
    """Issue a party certificate that no CA signed, so tests can show that the server rejects it."""
    _check_party(party)
    issued = _paths(out_dir, name)
    _refuse_overwrite(issued, force)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party_common_name(party))])
    not_before = _now() - _CLOCK_SKEW
    cert = (
        _base_builder(subject, subject, key.public_key(), not_before, not_before + dt.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(party_uri(party))]), False)
        .sign(key, hashes.SHA256())
    )
    _write_pair(issued, cert, key)
    return issued


def load_certificate(path: Path) -> x509.Certificate:
    """Read one PEM certificate, with an error that names the file when it is missing or not PEM."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CertsError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise CertsError(f"{path} is not a PEM certificate (expected -----BEGIN CERTIFICATE-----)") from exc


def is_signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ``ca`` issued ``cert``: the issuer name matches and the signature verifies."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def is_ca(cert: x509.Certificate) -> bool:
    """Whether ``cert`` may sign other certificates (basicConstraints CA:TRUE)."""
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _check_party(party: int) -> None:
    if isinstance(party, bool) or not isinstance(party, int) or party < 1:
        raise CertsError(f"party must be a positive integer, got {party!r}")


def _paths(out_dir: Path, stem: str) -> IssuedCert:
    return IssuedCert(cert_path=out_dir / f"{stem}.pem", key_path=out_dir / f"{stem}.key")


def _refuse_overwrite(issued: IssuedCert, force: bool) -> None:
    if force:
        return
    for path in (issued.key_path, issued.cert_path):
        if path.exists():
            raise KeyExistsError(f"{path} already exists; pass --force to replace it")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _validity(
    days: int, not_valid_before: dt.datetime | None, not_valid_after: dt.datetime | None
) -> tuple[dt.datetime, dt.datetime]:
    not_before = not_valid_before or _now() - _CLOCK_SKEW
    not_after = not_valid_after or not_before + dt.timedelta(days=days)
    if not_after <= not_before:
        raise CertsError(f"certificate would expire ({not_after}) before it becomes valid ({not_before})")
    return not_before, not_after


def _base_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def _leaf_builder(
    ca: CertificateAuthority,
    common_name: str,
    key: ec.EllipticCurvePrivateKey,
    not_before: dt.datetime,
    not_after: dt.datetime,
    usage: x509.ObjectIdentifier,
) -> x509.CertificateBuilder:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    return (
        _base_builder(subject, ca.cert.subject, key.public_key(), not_before, not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _ec_public_key(cert: x509.Certificate, path: Path) -> ec.EllipticCurvePublicKey:
    public_key = cert.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise CertsError(f"{path} does not hold an EC key; recreate it with vfl-certs")
    return public_key


def _write_pair(issued: IssuedCert, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write_atomically(issued.key_path, key_pem, _PRIVATE_MODE)
    _write_atomically(issued.cert_path, cert.public_bytes(serialization.Encoding.PEM), _PUBLIC_MODE)


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Write via a temporary file created with ``mode``, so no reader ever sees a partial or open file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            # A strict umask may have narrowed a certificate below 0644; a key stays at 0600 throughout.
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
