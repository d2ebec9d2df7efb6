"""Client importance (VIM, 004 §4.2): each party's head norm, as JSON and as a bar chart.

With one linear head W_k per party, ‖W_k‖ measures how much the trained model leans on party
k's embedding. A party whose features carry no signal (noise, say) ends with the smallest norm,
which makes the report a tool for spotting a useless or broken data source.
"""

from __future__ import annotations

import json
from pathlib import Path

JSON_NAME = "client_importance.json"
PNG_NAME = "client_importance.png"


def write_client_importance(run_dir: Path, norms: dict[int, float], *, title: str) -> tuple[Path, Path]:
    """Write ``client_importance.json`` and ``.png`` into ``run_dir``; returns both paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only: a daemon has no display
    from matplotlib import pyplot as plt

    run_dir.mkdir(parents=True, exist_ok=True)
    parties = sorted(norms)
    json_path = run_dir / JSON_NAME
    json_path.write_text(
        json.dumps(
            {"measure": "Frobenius norm of each party's linear head W_k", "norms": {str(p): norms[p] for p in parties}},
            indent=2,
        )
    )
    figure, axes = plt.subplots(figsize=(1.2 + 0.9 * len(parties), 3.2))
    axes.bar([f"party {p}" for p in parties], [norms[p] for p in parties], color="#4c72b0")
    axes.set_ylabel("‖W_k‖ (Frobenius)")
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    png_path = run_dir / PNG_NAME
    figure.savefig(png_path, dpi=110)
    plt.close(figure)
    return json_path, png_path
