"""The client halves of the training algorithms, by the name the server's job announces."""

from __future__ import annotations

from vflclient.algorithms.adptvfedconv import AdptVFedConvClient
from vflclient.algorithms.apfed import APFedCClient, APFedClient
from vflclient.algorithms.asynchronous import AsyncClient
from vflclient.algorithms.base import ClientAlgorithm, ModelFactory, PassiveContext, ServerLink
from vflclient.algorithms.fedbcd import FedBCDClient
from vflclient.algorithms.splitnn import SplitNNClient
from vflclient.algorithms.vimadmm import VIMADMMClient
from vflclient.algorithms.vimadmm_j import VIMADMMJClient
from vflclient.algorithms.vimsgd import VIMSGDClient
from vflcore.errors import JoinRejected

CLIENT_ALGORITHMS: dict[str, type[ClientAlgorithm]] = {
    SplitNNClient.name: SplitNNClient,
    FedBCDClient.name: FedBCDClient,
    AsyncClient.name: AsyncClient,
    VIMSGDClient.name: VIMSGDClient,
    VIMADMMClient.name: VIMADMMClient,
    VIMADMMJClient.name: VIMADMMJClient,
    APFedClient.name: APFedClient,
    APFedCClient.name: APFedCClient,
    AdptVFedConvClient.name: AdptVFedConvClient,
}


def client_algorithm(name: str) -> type[ClientAlgorithm]:
    """The client half for ``name``; a server asking for an unknown one is refused clearly."""
    try:
        return CLIENT_ALGORITHMS[name]
    except KeyError:
        raise JoinRejected(
            f"the server's job uses algorithm {name!r}, which this client does not have "
            f"(it has {sorted(CLIENT_ALGORITHMS)}); upgrade vfl-client"
        ) from None


__all__ = [
    "CLIENT_ALGORITHMS",
    "ClientAlgorithm",
    "ModelFactory",
    "PassiveContext",
    "ServerLink",
    "client_algorithm",
]
