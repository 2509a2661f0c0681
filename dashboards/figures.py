"""Plotly figure specs built from rollup data.

Figures are plain Plotly JSON (dicts) rather than plotly.graph_objects: the spec is the same, and
skipping graph_objects' per-trace validation keeps page renders fast for large fleets.
"""

from __future__ import annotations

LAYOUT = {
    "margin": {"l": 55, "r": 15, "t": 40, "b": 40},
    "height": 320,
    "hovermode": "x unified",
    "legend": {"orientation": "h", "y": -0.2},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
    "xaxis": {"type": "date", "gridcolor": "#e5e7eb"},
}


def _label(s: dict) -> str:
    who = s["host"] if s["gpu_index"] is None else f"{s['host']} · GPU {s['gpu_index']}"
    return who + (" (simulated)" if s["simulated"] else "")


# Above this many points SVG gets sluggish in the browser; WebGL draws them on a canvas instead.
WEBGL_POINTS = 20_000


def _lines(usage: dict, key: str, title: str, unit: str, y_range=None) -> dict:
    points = sum(len(s["t"]) for s in usage["series"])
    kind = "scattergl" if points > WEBGL_POINTS else "scatter"
    traces = [
        {"type": kind, "mode": "lines", "name": _label(s), "x": s["t"], "y": s[key],
         "connectgaps": False, "hovertemplate": f"%{{y:.1f}} {unit}<extra>{_label(s)}</extra>"}
        for s in usage["series"]
    ]
    yaxis = {"title": {"text": unit}, "gridcolor": "#e5e7eb", "rangemode": "tozero"}
    if y_range:
        yaxis["range"] = y_range
    return {"data": traces, "layout": {**LAYOUT, "title": {"text": title}, "yaxis": yaxis}}


def utilisation(usage: dict) -> dict:
    return _lines(usage, "util_pct", "GPU utilisation", "%", [0, 100])


def power(usage: dict) -> dict:
    if usage.get("grouping") == "host":
        return _lines(usage, "power_w", "GPU power draw per host (sum of its GPUs)", "W")
    return _lines(usage, "power_w", "GPU power draw", "W")


def energy(usage: dict) -> dict:
    """Energy per bucket, stacked by host: the height of a bar is the fleet's kWh in it."""
    per_host: dict[str, dict[str, float]] = {}
    for s in usage["series"]:
        bars = per_host.setdefault(s["host"], {})
        for t, kwh in zip(s["t"], s["energy_kwh"], strict=True):
            bars[t] = bars.get(t, 0.0) + kwh
    simulated = {s["host"] for s in usage["series"] if s["simulated"]}
    traces = [
        {"type": "bar", "name": host + (" (simulated)" if host in simulated else ""),
         "x": list(bars), "y": [round(v, 6) for v in bars.values()],
         "hovertemplate": "%{y:.4f} kWh<extra>" + host + "</extra>"}
        for host, bars in sorted(per_host.items())
    ]
    per = usage["resolution"]
    return {
        "data": traces,
        "layout": {**LAYOUT, "barmode": "stack", "title": {"text": f"GPU energy per {per}"},
                   "yaxis": {"title": {"text": "kWh"}, "gridcolor": "#e5e7eb"}},
    }


def dashboard_figures(usage: dict) -> dict[str, dict]:
    return {"utilisation": utilisation(usage), "power": power(usage), "energy": energy(usage)}
