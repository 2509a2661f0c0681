"""Plotly specs (plain dicts) for a workload's benchmark history: one figure per KPI, runs in
order along the x axis (labelled by commit), the gate's tolerance band around each run's
baseline, and acknowledged regressions marked."""

from __future__ import annotations

from collectors import bench_gate as gate
from greenops.chart_style import GRID_COLOUR, axis, layout

VERDICT_COLOUR = {gate.PASS: "#15803d", gate.FAIL: "#b91c1c", gate.INCONCLUSIVE: "#b45309",
                  "": "#2563eb"}


def kpi_history(points: list[dict], kpi: gate.Kpi, steps: list[dict] | None = None) -> dict:
    """``points`` is greenops.benchmarks.runs.history() output; ``steps`` its change points
    (runs.change_points): a dashed line at the first run after each, labelled with the size."""
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
    shapes, notes = [], []
    for step in steps or []:
        run = step["run"]
        at = f"{run.short_commit} #{run.id}"
        colour = "#b91c1c" if step["up"] else "#15803d"
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": at, "x1": at,
                       "y0": 0, "y1": 1, "line": {"color": colour, "width": 2, "dash": "dash"}})
        notes.append({"x": at, "y": 1, "xref": "x", "yref": "paper", "yanchor": "bottom",
                      "showarrow": False, "font": {"color": colour, "size": 12},
                      "text": f"{'▲' if step['up'] else '▼'} {step['change_pct']:+.1f} %"
                              + (" (simulated)" if step.get("simulated") else "")})
    if steps:
        traces.append({"type": "scatter", "mode": "markers", "name": "change point (E-Divisive)",
                       "x": [f"{s['run'].short_commit} #{s['run'].id}" for s in steps],
                       "y": [s["after"] for s in steps],
                       "text": [f"{s['branch'] or 'no branch'}: stepped {s['change_pct']:+.1f} % "
                                f"(median {s['before']:.4g} → {s['after']:.4g})"
                                + (", simulated runs" if s.get("simulated") else "")
                                for s in steps],
                       "marker": {"symbol": "diamond-open", "size": 16, "line": {"width": 2},
                                  "color": ["#b91c1c" if s["up"] else "#15803d"
                                            for s in steps]},
                       "hovertemplate": "%{text}<extra></extra>"})
    title = f"{kpi.label} ({kpi.unit})" + (" (incl. simulated)" if simulated else "")
    return {"data": traces, "layout": layout(
        title, hovermode="closest", shapes=shapes, annotations=notes, height=400,
        # Commit labels turn vertical on a phone: the legend sits at the chart's foot, below
        # them, instead of on top of them.
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"},
        margin={"l": 55, "r": 15, "t": 40, "b": 150},
        xaxis={"type": "category", "gridcolor": GRID_COLOUR, "automargin": True},
        yaxis=axis(kpi.unit, rangemode="tozero"))}
