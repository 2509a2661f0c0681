"""Plotly figure specs (plain dicts) for the KPI pages, built from queries.series output."""

from __future__ import annotations

from greenops.chart_style import GRID_COLOUR, LAYOUT


def _title(text: str, simulated: bool) -> dict:
    return {"text": text + (" (includes simulated data)" if simulated else "")}


def _line(s: dict, key: str, title: str, unit: str, kind: str = "scatter") -> dict:
    trace = {"type": kind, "mode": "lines+markers", "name": title, "x": s["t"], "y": s[key],
             "connectgaps": False, "hovertemplate": f"%{{y:.4g}} {unit}<extra></extra>"}
    if kind == "bar":
        trace.pop("mode")
        trace.pop("connectgaps")
    return {"data": [trace], "layout": {
        **LAYOUT, "title": _title(title, s["simulated"]), "showlegend": False,
        "yaxis": {"title": {"text": unit}, "gridcolor": GRID_COLOUR, "rangemode": "tozero"}}}


def energy_per_inference(s: dict) -> dict:
    return _line(s, "energy_per_inference_j", "Energy per inference", "J")


def throughput(s: dict) -> dict:
    return _line(s, "throughput_per_s", "Throughput", "inferences/s")


def energy(s: dict) -> dict:
    return _line(s, "energy_kwh", f"IT energy per {s['period']} (GPU + CPU + RAM)", "kWh", "bar")


def latency_vs_energy(s: dict) -> dict:
    """One point per bucket: does spending more energy buy lower tail latency?"""
    points = [(e, p, t) for e, p, t in zip(s["energy_kwh"], s["latency_p99_ms"], s["t"],
                                           strict=True) if p is not None]
    trace = {"type": "scatter", "mode": "markers", "name": "p99",
             "x": [p[0] for p in points], "y": [p[1] for p in points],
             "text": [p[2] for p in points],
             "hovertemplate": "%{text}<br>%{x:.4g} kWh, p99 %{y:.4g} ms<extra></extra>"}
    return {"data": [trace], "layout": {
        **LAYOUT, "hovermode": "closest", "showlegend": False,
        "title": _title(f"p99 latency against energy, per {s['period']}", s["simulated"]),
        "xaxis": {"title": {"text": "kWh"}, "gridcolor": GRID_COLOUR, "rangemode": "tozero"},
        "yaxis": {"title": {"text": "p99 latency (ms)"}, "gridcolor": GRID_COLOUR,
                  "rangemode": "tozero"}}}
