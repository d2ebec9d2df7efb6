"""Who may call the inference endpoint: caller and operator certificates, party certificates only when allowed.

A passive party knows every aligned sample ID, so a party certificate on the endpoint could ask
for the prediction of every training row, which is close to the labels the active party keeps
to itself. So the endpoint refuses party certificates, on both protocols and every route,
unless ``[serving] allow_party_certificates = true`` says otherwise. Callers (``vfl-certs
caller``) and operators are served. The identity is read from the verified certificate only.
"""

from __future__ import annotations


def refusal(party: int | None, *, allow_parties: bool) -> str | None:
    """Why a caller whose certificate names ``party`` (None: not a party's) may not call, or None.

    Each protocol answers with its own status: gRPC PERMISSION_DENIED, REST 403.
    """
    if party is None or allow_parties:
        return None
    return (
        f"party {party}'s certificate may not call the inference endpoint: a party could read the "
        "predictions of every aligned row; call with a caller certificate (vfl-certs caller NAME), "
        "or set [serving] allow_party_certificates = true"
    )
