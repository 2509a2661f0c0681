"""Plotly figure specs (plain dicts) for the costs page."""

from __future__ import annotations

from greenops.chart_style import GRID_COLOUR
from greenops.chart_style import LAYOUT as HOUSE

# The house style with a category x axis (instances running) and room for a two-row legend.
LAYOUT = {**HOUSE, "margin": {**HOUSE["margin"], "b": 45}, "height": 280, "showlegend": True,
          "hovermode": "closest", "legend": {"orientation": "h", "y": -0.3}}


def commitment_curve(rec: dict) -> dict | None:
    """Bars: share of hours with at least N instances running. Lines: each commitment option's
    break-even share. Committing to N instances pays off where the bar clears the line."""
    curve = rec.get("detail", {}).get("share_at_least")
    if not curve:
        return None
    xs = list(range(1, len(curve) + 1))
    data = [{"type": "bar", "name": "hours with at least N running", "x": xs,
             "y": [round(v * 100, 2) for v in curve], "marker": {"color": "#16a34a"},
             "hovertemplate": "%{y:.1f} % of hours with at least %{x} running<extra></extra>"}]
    for alt in rec["detail"].get("alternatives", []):
        be = round(alt["break_even_utilisation"] * 100, 2)
        data.append({"type": "scatter", "mode": "lines", "name": f"{alt['option']} break-even",
                     "x": [0.5, len(curve) + 0.5], "y": [be, be], "line": {"dash": "dash"},
                     "hovertemplate": f"{alt['option']}: breaks even at {be:.1f} %<extra></extra>"})
    return {"data": data, "layout": {
        **LAYOUT, "title": {"text": f"{rec['subject']}: usage vs break-even"},
        "xaxis": {"title": {"text": "instances running (N)"}, "dtick": 1},
        "yaxis": {"title": {"text": "% of hours"}, "range": [0, 100], "gridcolor": GRID_COLOUR},
    }}
