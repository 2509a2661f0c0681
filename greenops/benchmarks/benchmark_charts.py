"""Plotly specs (plain dicts) for a workload's benchmark history: one figure per KPI, runs in
order along the x axis (labelled by commit), the gate's tolerance band around each run's
baseline, and acknowledged regressions marked."""

from __future__ import annotations

from collectors import bench_gate as gate
from greenops.chart_style import GRID_COLOUR, axis, layout

VERDICT_COLOUR = {gate.PASS: "#15803d", gate.FAIL: "#b91c1c", gate.INCONCLUSIVE: "#b45309",
                  "": "#2563eb"}


def kpi_history(points: list[dict], kpi: gate.Kpi) -> dict:
    """``points`` is greenops.benchmarks.runs.history() output."""
    x = [f"{p['run'].short_commit} #{p['run'].id}" for p in points]
    k = [p["kpis"][kpi.key] for p in points]
    simulated = any(p["run"].simulated for p in points)
    text = []
    for p, v in zip(points, k, strict=True):
        run = p["run"]
        parts = [f"{run.branch or 'no branch'} · {run.started_at:%Y-%m-%d %H:%M} UTC",
                 v["verdict"] or "not gated"]
        if run.simulated:
            parts.append("SIMULATED")
        if v["ack"]:
            parts.append(f"acknowledged: {v['ack']}")
        text.append("<br>".join(parts))
    lower = [v["band"][0] if v["band"] else None for v in k]
    upper = [v["band"][1] if v["band"] else None for v in k]
    traces = [
        {"type": "scatter", "mode": "lines", "x": x, "y": lower, "name": "band",
         "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False, "connectgaps": False},
        {"type": "scatter", "mode": "lines", "x": x, "y": upper,
         "name": f"baseline ± {kpi.tolerance_pct:g} % (the gate's tolerance)",
         "fill": "tonexty", "fillcolor": "rgba(37,99,235,0.12)", "line": {"width": 0},
         "hoverinfo": "skip", "connectgaps": False},
        {"type": "scatter", "mode": "lines+markers", "x": x, "y": [v["value"] for v in k],
         "name": "this run (median of repeats)", "text": text,
         "line": {"color": "#94a3b8"},
         "marker": {"size": 9, "color": [VERDICT_COLOUR.get(v["verdict"], "#2563eb")
                                         for v in k]},
         "hovertemplate": f"%{{y:.4g}} {kpi.unit}<br>%{{text}}<extra></extra>"},
    ]
    acked = [(xi, v["value"], v["ack"]) for xi, v in zip(x, k, strict=True) if v["ack"]]
    if acked:
        traces.append({"type": "scatter", "mode": "markers", "name": "acknowledged regression",
                       "x": [a[0] for a in acked], "y": [a[1] for a in acked],
                       "text": [a[2] for a in acked],
                       "marker": {"symbol": "star", "size": 15, "color": "#7c3aed"},
                       "hovertemplate": "acknowledged: %{text}<extra></extra>"})
    title = f"{kpi.label} ({kpi.unit})" + (" (incl. simulated)" if simulated else "")
    return {"data": traces, "layout": layout(
        title, hovermode="closest",
        xaxis={"type": "category", "gridcolor": GRID_COLOUR, "automargin": True},
        yaxis=axis(kpi.unit, rangemode="tozero"))}
