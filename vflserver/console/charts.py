"""Line charts as inline SVG, drawn on the server from numbers the page already has: no script, no library.

Coordinates are whole pixels on purpose: a chart of a job's losses is then a list of integers,
never a run of decimals that could read like a printed tensor (``vfltesting.leaks`` looks for
those in every page, as it does in every log line).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT, MARGIN = 520, 200, 36
#: One colour per series, in order (the console's stylesheet has no chart colours of its own).
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989")


def line_chart(title: str, series: Mapping[str, Sequence[float]], x_label: str = "epoch") -> str:
    """An SVG of each named series against its index (1, 2, ...); NaN points are skipped."""
    points = [v for values in series.values() for v in values if math.isfinite(v)]
    if not points:
        return f'<p class="muted">{escape(title)}: nothing yet</p>'
    low, high = min(points), max(points)
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    longest = max(len(values) for values in series.values())
    span_x = max(longest - 1, 1)

    def x(i: int) -> int:
        return round(MARGIN + (WIDTH - 2 * MARGIN) * i / span_x)

    def y(v: float) -> int:
        return round(HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * (v - low) / (high - low))

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{MARGIN}" y="16" class="title">{escape(title)}</text>',
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" class="axis"/>',
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" class="axis"/>',
        f'<text x="4" y="{MARGIN + 4}" class="tick">{high:.3g}</text>',
        f'<text x="4" y="{HEIGHT - MARGIN}" class="tick">{low:.3g}</text>',
        f'<text x="{WIDTH // 2}" y="{HEIGHT - 8}" class="tick">{escape(x_label)} 1 to {longest}</text>',
    ]
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        coords = [f"{x(i)},{y(v)}" for i, v in enumerate(values) if math.isfinite(v)]
        if len(coords) == 1:
            cx, cy = coords[0].split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>')
        elif coords:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(coords)}"/>')
        parts.append(
            f'<text x="{WIDTH - MARGIN - 110}" y="{MARGIN + 14 * index}" class="legend" fill="{colour}">'
            f"{escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["line_chart"]
