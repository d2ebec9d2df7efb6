"""matplotlib for the benches' plots: the Agg backend (no display), imported only when a plot is drawn."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported only when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt
