"""The rule page's chart: the values the rule saw, its fire and clear levels, and its state
changes, as a Plotly figure spec (plain dict)."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from greenops.alerts import kpi_values
from greenops.alerts.models import Rule, RuleKind
from greenops.chart_style import LAYOUT, MAX_POINTS, axis
from greenops.units import plural

STATE_COLOURS = {"ok": "#15803d", "pending": "#b45309", "firing": "#b91c1c",
                 "recovering": "#7c3aed", "nodata": "#6b7280", "error": "#111827"}


def thin(points: list[tuple[dt.datetime, float | None]], worst=max,
         budget: int = MAX_POINTS) -> list[tuple[dt.datetime, float | None]]:
    """At most `budget` points (a week of minutely evaluations is 10,080): each run of
    consecutive points becomes its last time and its worst value, so a short breach still
    shows on a thinned chart."""
    if len(points) <= budget:
        return points
    size = -(-len(points) // budget)
    out = []
    for i in range(0, len(points), size):
        chunk = points[i:i + size]
        values = [v for _, v in chunk if v is not None]
        out.append((chunk[-1][0], worst(values) if values else None))
    return out


def rule_chart(rule: Rule, days: int = 7) -> dict | None:
    now = timezone.now()
    since = now - dt.timedelta(days=days)
    points = thin(list(rule.values.filter(at__gte=since).values_list("at", "value")),
                  worst=max if rule.direction != "below" or rule.kind == RuleKind.STOPPED else min)
    if not points:
        return None
    xs = [t.isoformat() for t, _ in points]
    # At least the last hour is shown, so a new rule's first points and its levels read as
    # lines over time, not as dots on a millisecond axis.
    start = min(points[0][0], now - dt.timedelta(hours=1))
    x0, x1 = start.isoformat(), (now + (now - start) * 0.03).isoformat()  # room for the last dot
    if rule.kind == RuleKind.STOPPED:
        unit, title = "hosts", "Hosts not reporting"
    elif rule.kind == RuleKind.CHANGE:
        unit, title = "%", f"Change in {kpi_values.KPIS[rule.kpi].label.lower()} against " \
                           f"{plural(rule.baseline_days, 'day')} earlier"
    else:
        unit, title = kpi_values.KPIS[rule.kpi].unit, kpi_values.KPIS[rule.kpi].label
    data = [{"type": "scatter", "mode": "lines+markers", "name": "value", "x": xs,
             "y": [v for _, v in points], "connectgaps": False,
             "hovertemplate": f"%{{y:.4g}} {unit}<extra></extra>"}]
    levels = []
    if rule.kind == RuleKind.CHANGE and rule.fire_level is not None:
        sign = -1 if rule.direction == "below" else 1
        levels = [("fires", sign * rule.fire_level, "#b91c1c"),
                  ("clears", sign * rule.effective_clear_level(), "#15803d")]
    elif rule.kind == RuleKind.BUDGET:
        levels = [("budget", rule.fire_level, "#b91c1c")]
    elif rule.kind == RuleKind.THRESHOLD:
        levels = [("fires", rule.fire_level, "#b91c1c")]
        if rule.clear_level is not None and rule.clear_level != rule.fire_level:
            levels.append(("clears", rule.clear_level, "#15803d"))
    for name, y, colour in levels:
        data.append({"type": "scatter", "mode": "lines", "name": f"{name} at {y:g}",
                     "x": [x0, x1], "y": [y, y], "hoverinfo": "skip",
                     "line": {"dash": "dash", "color": colour, "width": 1}})
    events = list(rule.events.filter(at__gte=since).order_by("at"))
    if events:
        data.append({"type": "scatter", "mode": "markers", "name": "state changes",
                     "x": [e.at.isoformat() for e in events], "y": [e.value for e in events],
                     "text": [f"{e.from_state} → {e.to_state}" for e in events],
                     "marker": {"size": 11, "symbol": "diamond",
                                "color": [STATE_COLOURS.get(e.to_state, "#111") for e in events]},
                     "hovertemplate": "%{text}<extra></extra>"})
    return {"data": data, "layout": {
        **LAYOUT, "title": {"text": f"{title}, last {days} days"},  # a point per evaluation
        "showlegend": True, "legend": {"orientation": "h", "y": -0.2},
        "xaxis": {**LAYOUT["xaxis"], "range": [x0, x1]},
        "yaxis": axis(unit, rangemode="tozero")}}
