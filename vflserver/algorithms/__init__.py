"""The server halves of the training algorithms, by the name ``[job] algorithm`` uses."""

from __future__ import annotations

from vflcore.errors import ConfigError
from vflserver.algorithms.adptvfedconv import AdptVFedConvServer
from vflserver.algorithms.apfed import APFedCServer, APFedServer
from vflserver.algorithms.asynchronous import AsyncServer
from vflserver.algorithms.base import ActiveContext, ServerAlgorithm
from vflserver.algorithms.fedbcd import FedBCDServer
from vflserver.algorithms.splitnn import SplitNNServer
from vflserver.algorithms.vimadmm import VIMADMMServer
from vflserver.algorithms.vimadmm_j import VIMADMMJServer
from vflserver.algorithms.vimsgd import VIMSGDServer

SERVER_ALGORITHMS: dict[str, type[ServerAlgorithm]] = {
    SplitNNServer.name: SplitNNServer,
    FedBCDServer.name: FedBCDServer,
    AsyncServer.name: AsyncServer,
    VIMSGDServer.name: VIMSGDServer,
    VIMADMMServer.name: VIMADMMServer,
    VIMADMMJServer.name: VIMADMMJServer,
    APFedServer.name: APFedServer,
    APFedCServer.name: APFedCServer,
    AdptVFedConvServer.name: AdptVFedConvServer,
}


def server_algorithm(name: str) -> type[ServerAlgorithm]:
    """The server half for ``name``, or a ConfigError listing what exists."""
    try:
        return SERVER_ALGORITHMS[name]
    except KeyError:
        raise ConfigError(
            f"[job] algorithm = {name!r} is not available; choose one of {sorted(SERVER_ALGORITHMS)}"
        ) from None


__all__ = ["SERVER_ALGORITHMS", "ActiveContext", "ServerAlgorithm", "server_algorithm"]
