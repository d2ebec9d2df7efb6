"""Say who a certificate, or a gRPC peer, is: a party, an operator, an inference caller, or none of them.

Every certificate comes from the one project CA (``vfl-certs``) and has one of four roles:

- **party** N: CN ``party-N`` and URI SAN ``vfl://party/N``. It joins jobs as party N on the
  Federation service. Party 1 is the active party (the label holder that runs ``vfl-server``);
  passive parties are 2, 3, ...
- **operator** NAME: CN ``NAME`` and URI SAN ``vfl://operator/NAME``. It submits, lists, watches
  and cancels jobs on the Control service; it is never a party.
- **caller** (inference) NAME: CN ``NAME``, no ``vfl://`` SAN, and a client certificate
  (clientAuth, not a CA). It is neither a party nor an operator; the inference endpoint accepts
  it, as it accepts any client certificate of the CA. ``caller_from_certificate`` names it for
  people (``vfl-certs show``); no server decision rests on it, since "no role" is all a caller has.
- **server**: serverAuth only, with DNS and IP SANs; here it is neither a party nor an operator.

A role is read from two places that must agree: the CN and the single URI SAN of that role.
Anything else is "no role", so that a certificate from some other PKI, or one naming two roles,
never passes by accident. Operator names never look like ``party-N`` and a certificate with a
URI of the other role is refused, so no certificate is both a party and an operator.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_CN_PATTERN = re.compile(r"party-([1-9][0-9]{0,8})")
_URI_PREFIX = "vfl://party/"
_URI_PATTERN = re.compile(re.escape(_URI_PREFIX) + r"([1-9][0-9]{0,8})")
_OPERATOR_URI_PREFIX = "vfl://operator/"
# ASCII only because the name is also a URI path segment; 64 is the X.509 upper bound of a CN.
_OPERATOR_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def party_common_name(party: int) -> str:
    """The subject CN of party ``party``'s certificate."""
    return f"party-{party}"


def party_uri(party: int) -> str:
    """The URI SAN of party ``party``'s certificate."""
    return f"{_URI_PREFIX}{party}"


def is_operator_name(name: str) -> bool:
    """Whether ``name`` may name an operator.

    1 to 64 ASCII letters, digits, '-', '_' or '.', starting with a letter or digit, and not
    ``party-...``, which would read as a party.
    """
    return _OPERATOR_NAME_PATTERN.fullmatch(name) is not None and not name.startswith("party-")


def operator_uri(name: str) -> str:
    """The URI SAN of operator ``name``'s certificate."""
    return f"{_OPERATOR_URI_PREFIX}{name}"


def party_from_certificate(cert: x509.Certificate) -> int | None:
    """The party id that ``cert`` names in both its CN and its URI SAN, or None if it is not a party's."""
    common_names, uris = _names(cert)
    return _agreeing_party(common_names, uris)


def operator_from_certificate(cert: x509.Certificate) -> str | None:
    """The operator name that ``cert`` names in both its CN and its URI SAN, or None if it is not an operator's."""
    common_names, uris = _names(cert)
    return _agreeing_operator(common_names, uris)


def caller_from_certificate(cert: x509.Certificate) -> str | None:
    """The caller name of an inference caller's certificate (``vfl-certs caller NAME``), or None for any other.

    A caller's certificate is what is left of the client certificates once parties and operators
    are taken out: one CN that does not read as ``party-N``, no ``vfl://`` URI SAN, clientAuth in
    its extended key usage, and not a CA. The server's certificate (serverAuth only) and the CA are
    not callers.
    """
    common_names, uris = _names(cert)
    if len(common_names) != 1 or common_names[0].startswith("party-") or not common_names[0]:
        return None
    if any(uri.startswith("vfl://") for uri in uris):  # a role of this project's, or one it does not know
        return None
    if not _is_client_leaf(cert):
        return None
    return common_names[0]


def party_from_auth_context(auth_context: Mapping[str, Sequence[bytes]]) -> int | None:
    """The party id of a gRPC peer, from what ``ServicerContext.auth_context()`` returns on the server.

    Only an mTLS peer counts. The id is read from ``x509_pem_cert``, the certificate the handshake
    verified against the CA, because ``x509_subject_alternative_name`` lists DNS names, URIs and IPs
    as bare strings without their types. For a party-2 client, grpcio 1.81 gives::

        transport_security_type=[b"ssl"], x509_common_name=[b"party-2"], x509_subject=[b"CN=party-2"],
        x509_subject_alternative_name=[b"vfl://party/2"], peer_uri=[b"vfl://party/2"],
        x509_pem_cert=[b"-----BEGIN CERTIFICATE-----..."], security_level=[b"TSI_PRIVACY_AND_INTEGRITY"]
    """
    pem = _verified_pem(auth_context)
    return None if pem is None else _party_from_pem(pem)


def operator_from_auth_context(auth_context: Mapping[str, Sequence[bytes]]) -> str | None:
    """The operator name of a gRPC peer, read from its verified certificate as ``party_from_auth_context`` does."""
    pem = _verified_pem(auth_context)
    return None if pem is None else _operator_from_pem(pem)


def expiry_from_auth_context(auth_context: Mapping[str, Sequence[bytes]]) -> float | None:
    """When a gRPC peer's verified certificate expires (seconds since the epoch), or None without one.

    The console shows each party the days its certificate has left: a party whose certificate
    lapses is refused at the next handshake, with nothing on its side to say why.
    """
    pem = _verified_pem(auth_context)
    return None if pem is None else _expiry_from_pem(pem)


@functools.lru_cache(maxsize=256)
def _expiry_from_pem(pem: bytes) -> float | None:
    cert = _load_pem(pem)
    return None if cert is None else cert.not_valid_after_utc.timestamp()


@functools.lru_cache(maxsize=256)
def operator_from_der(der: bytes) -> str | None:
    """The operator name of a verified certificate in DER form (the console's check), or None."""
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    return operator_from_certificate(cert)


@functools.lru_cache(maxsize=256)
def party_from_der(der: bytes) -> int | None:
    """The party id of a verified certificate in DER form (what ``SSLObject.getpeercert(True)`` gives)."""
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    return party_from_certificate(cert)


def _verified_pem(auth_context: Mapping[str, Sequence[bytes]]) -> bytes | None:
    """The peer's one certificate from an mTLS handshake, or None for any other peer."""
    if list(auth_context.get("transport_security_type", ())) != [b"ssl"]:
        return None
    pems = list(auth_context.get("x509_pem_cert", ()))
    if len(pems) != 1:
        return None
    return bytes(pems[0])


# Cached because the server asks on every RPC and a peer keeps presenting the same certificate.
@functools.lru_cache(maxsize=256)
def _party_from_pem(pem: bytes) -> int | None:
    cert = _load_pem(pem)
    return None if cert is None else party_from_certificate(cert)


@functools.lru_cache(maxsize=256)
def _operator_from_pem(pem: bytes) -> str | None:
    cert = _load_pem(pem)
    return None if cert is None else operator_from_certificate(cert)


def _load_pem(pem: bytes) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None


def _names(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """The subject CNs and the URI SANs of ``cert``."""
    common_names = [str(attr.value) for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return common_names, []
    return common_names, san.get_values_for_type(x509.UniformResourceIdentifier)


def _is_client_leaf(cert: x509.Certificate) -> bool:
    """Whether ``cert`` may authenticate a TLS client (extended key usage clientAuth) and is no CA."""
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages and not is_ca


def _agreeing_party(common_names: Sequence[str], uris: Sequence[str]) -> int | None:
    if len(common_names) != 1 or any(uri.startswith(_OPERATOR_URI_PREFIX) for uri in uris):
        return None
    cn_match = _CN_PATTERN.fullmatch(common_names[0])
    party_uris = [uri for uri in uris if uri.startswith(_URI_PREFIX)]
    if cn_match is None or len(party_uris) != 1:
        return None
    uri_match = _URI_PATTERN.fullmatch(party_uris[0])
    if uri_match is None or uri_match.group(1) != cn_match.group(1):
        return None
    return int(cn_match.group(1))


def _agreeing_operator(common_names: Sequence[str], uris: Sequence[str]) -> str | None:
    if len(common_names) != 1 or any(uri.startswith(_URI_PREFIX) for uri in uris):
        return None
    name = common_names[0]
    operator_uris = [uri for uri in uris if uri.startswith(_OPERATOR_URI_PREFIX)]
    if not is_operator_name(name) or operator_uris != [operator_uri(name)]:
        return None
    return name
