"""VIMSGD, a passive party's half (004 Appendix A.1, Eq. 14-15).

On the wire and on the client it is SplitNN: send h^k, receive ∂L/∂h^k, update the bottom
model. What differs is on the server (linear heads, updated before the gradient is computed),
so this half only gives the algorithm its name.
"""

from __future__ import annotations

from vflalgorithms.splitnn.passive import SplitNNClient


class VIMSGDClient(SplitNNClient):
    """SplitNN's client half under the name the server's job uses."""

    name = "vimsgd"
