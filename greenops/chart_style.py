"""Chart styling and the point budget, shared by every app's Plotly figures.

Figures are plain Plotly JSON (dicts): the spec is the same as plotly.graph_objects builds, and
skipping its per-trace validation keeps page renders fast for large fleets. This module sits
below the pages (dashboards/, kpis/, costs/ figures import it; it imports no app), so a figure
built for a report or an alert looks like the one on the page.
"""

from __future__ import annotations

from typing import Any

GRID_COLOUR = "#e5e7eb"
# One palette for every chart, so a workload keeps its colour from page to page.
PALETTE = ("#15803d", "#2563eb", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d",
           "#dc2626", "#4b5563", "#0d9488")

LAYOUT: dict[str, Any] = {
    "margin": {"l": 55, "r": 15, "t": 40, "b": 40},
    "height": 320,
    "hovermode": "x unified",
    # Below the date ticks (two lines: time, then the date where it changes).
    "legend": {"orientation": "h", "y": -0.22, "yanchor": "top"},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "xaxis": {"type": "date", "gridcolor": GRID_COLOUR},
}

# Grafana's "max data points": a series never carries more points than a chart is wide in
# pixels can show. 300 is a 1,200 px wide chart at 4 px per point; the phone draws fewer pixels
# but the same points (Plotly scales them), so one budget serves both widths.
MAX_POINTS = 300


def axis(title: str, **extra: Any) -> dict[str, Any]:
    """A value axis with the house grid and its unit as title."""
    return {"title": {"text": title}, "gridcolor": GRID_COLOUR, **extra}


def layout(title: str, **extra: Any) -> dict[str, Any]:
    """The house layout with a title; `extra` replaces top-level keys (yaxis, barmode, ...)."""
    return {**LAYOUT, "title": {"text": title}, **extra}


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def line_mode(y) -> dict[str, Any]:
    """The `mode` (and marker) of a line trace over `y`. Plotly draws a line only between
    neighbouring values, so a value whose neighbours are both missing -- a host's first
    minutes after enrolling, one bucket between two gaps -- would not show at all: the chart
    looked empty beside a card saying 50 % utilisation. A trace with such a value gets markers
    too (as Grafana shows points on a sparse series); a continuous one stays a bare line."""
    values = [None if v is None or v != v else v for v in y]  # NaN counts as missing
    for i, v in enumerate(values):
        if v is None:
            continue
        before = values[i - 1] if i > 0 else None
        after = values[i + 1] if i + 1 < len(values) else None
        if before is None and after is None:
            return {"mode": "lines+markers", "marker": {"size": 5}}
    return {"mode": "lines"}
