"""Say which party a certificate, or a gRPC peer, is.

A party certificate names its party twice: the subject CN ``party-N`` and the URI SAN
``vfl://party/N``. Both must be present and agree; anything else is "not a party", so that a
server certificate or a certificate from some other PKI never passes as a party by accident.
Party 1 is the active party (the label holder that runs ``vfl-server``); passive parties are 2, 3, ...
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.x509.oid import NameOID

_CN_PATTERN = re.compile(r"party-([1-9][0-9]{0,8})")
_URI_PREFIX = "vfl://party/"
_URI_PATTERN = re.compile(re.escape(_URI_PREFIX) + r"([1-9][0-9]{0,8})")


def party_common_name(party: int) -> str:
    """The subject CN of party ``party``'s certificate."""
    return f"party-{party}"


def party_uri(party: int) -> str:
    """The URI SAN of party ``party``'s certificate."""
    return f"{_URI_PREFIX}{party}"


def party_from_certificate(cert: x509.Certificate) -> int | None:
    """The party id that ``cert`` names in both its CN and its URI SAN, or None if it is not a party's."""
    common_names = [attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    return _agreeing_party([str(cn) for cn in common_names], uris)


def party_from_auth_context(auth_context: Mapping[str, Sequence[bytes]]) -> int | None:
    """The party id of a gRPC peer, from what ``ServicerContext.auth_context()`` returns on the server.

    Only an mTLS peer counts. The id is read from ``x509_pem_cert``, the certificate the handshake
    verified against the CA, because ``x509_subject_alternative_name`` lists DNS names, URIs and IPs
    as bare strings without their types. For a party-2 client, grpcio 1.81 gives::

        transport_security_type=[b"ssl"], x509_common_name=[b"party-2"], x509_subject=[b"CN=party-2"],
        x509_subject_alternative_name=[b"vfl://party/2"], peer_uri=[b"vfl://party/2"],
        x509_pem_cert=[b"-----BEGIN CERTIFICATE-----..."], security_level=[b"TSI_PRIVACY_AND_INTEGRITY"]
    """
    if list(auth_context.get("transport_security_type", ())) != [b"ssl"]:
        return None
    pems = list(auth_context.get("x509_pem_cert", ()))
    if len(pems) != 1:
        return None
    return _party_from_pem(bytes(pems[0]))


@functools.lru_cache(maxsize=256)
def _party_from_pem(pem: bytes) -> int | None:
    # Cached because the server asks on every RPC and a peer keeps presenting the same certificate.
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None
    return party_from_certificate(cert)


def _agreeing_party(common_names: Sequence[str], uris: Sequence[str]) -> int | None:
    if len(common_names) != 1:
        return None
    cn_match = _CN_PATTERN.fullmatch(common_names[0])
    party_uris = [uri for uri in uris if uri.startswith(_URI_PREFIX)]
    if cn_match is None or len(party_uris) != 1:
        return None
    uri_match = _URI_PATTERN.fullmatch(party_uris[0])
    if uri_match is None or uri_match.group(1) != cn_match.group(1):
        return None
    return int(cn_match.group(1))
