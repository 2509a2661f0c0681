"""Variant comparison: two workloads, or one workload over two periods (fp16 vs int8, batch 8
vs 32), side by side with the difference and whether it is beyond the hour-to-hour noise.

Figures are the KPIs' own (kpis.queries.kpis over KPI hour rollups), never recomputed. Noise:
each side's KPI is also taken hour by hour, and a two-sided Mann-Whitney U test over those
hourly values (the benchmark gate's implementation, collectors.bench_gate) says whether the two
differ beyond noise at ALPHA; with too few measured hours for the test to ever reach ALPHA the
answer is "too few hours", not a guess.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from collectors.bench_gate import mann_whitney_u, smallest_p
from greenops import windows
from greenops.kpis import metrics, queries
from greenops.kpis.models import Period
from greenops.teams.models import Team
from greenops.workloads.models import Workload

ALPHA = 0.05
# (key, label, unit, digits): what a variant is judged on.
KPIS: tuple[tuple[str, str, str, int], ...] = (
    ("energy_per_inference_j", "Energy per inference", "J", 3),
    ("cost_per_1k_inferences_usd", "Cost per 1k inferences", "USD", 4),
    ("latency_p99_ms", "p99 latency", "ms", 1),
    ("throughput_per_s", "Throughput", "/s", 2),
    ("gpu_util_pct", "GPU utilisation", "%", 1),
)


@dataclass(frozen=True)
class Side:
    workload: Workload
    window: windows.Window

    @property
    def label(self) -> str:
        return (f"{self.workload.name}, {self.window.start:%Y-%m-%d %H:%M} – "
                f"{self.window.end:%Y-%m-%d %H:%M} UTC")


@dataclass
class Line:
    key: str
    label: str
    unit: str
    digits: int
    a: float | None
    b: float | None
    change_pct: float | None = None  # (b / a - 1) x 100
    p_value: float | None = None
    verdict: str = ""  # "beyond noise", "within noise", "too few hours", "unknown"
    reason: str = ""
    hours: tuple[int, int] = (0, 0)


@dataclass
class Comparison:
    a: Side
    b: Side
    lines: list[Line] = field(default_factory=list)
    simulated: bool = False
    requests: tuple[int, int] = (0, 0)


def hour_window(start: dt.datetime, end: dt.datetime, label: str = "custom") -> windows.Window:
    """Whole hours, so the hour rollups cover the window exactly (start floored, end ceiled)."""
    return windows.Window(windows.floor_hour(start), windows.ceil(end, windows.HOUR), label,
                          label)


def _hourly(team: Team, side: Side) -> list[dict]:
    rows = queries.rows(team, side.workload, Period.HOUR, side.window.start, side.window.end)
    return [metrics.derive(metrics.merge([row]), 3600.0) for row in rows]


def compare(team: Team, a: Side, b: Side) -> Comparison:
    ka = queries.kpis(team, a.workload, a.window.start, a.window.end, Period.HOUR)
    kb = queries.kpis(team, b.workload, b.window.start, b.window.end, Period.HOUR)
    ha, hb = _hourly(team, a), _hourly(team, b)
    out = Comparison(a, b, simulated=bool(ka.get("simulated") or kb.get("simulated")),
                     requests=(ka.get("requests") or 0, kb.get("requests") or 0))
    for key, label, unit, digits in KPIS:
        line = Line(key, label, unit, digits, ka.get(key), kb.get(key))
        xa = [h[key] for h in ha if h.get(key) is not None]
        xb = [h[key] for h in hb if h.get(key) is not None]
        line.hours = (len(xa), len(xb))
        if line.a is None or line.b is None:
            line.verdict = "unknown"
            line.reason = "not measured in " + ("A" if line.a is None else "B")
        elif line.a == 0:
            line.verdict = "unknown"
            line.reason = "A is zero: no relative difference"
        else:
            line.change_pct = (line.b / line.a - 1.0) * 100.0
            if not xa or not xb or smallest_p(len(xa), len(xb)) >= ALPHA:
                line.verdict = "too few hours"
                line.reason = (f"{len(xa)} and {len(xb)} measured hours: the test cannot "
                               f"reach p < {ALPHA:g}")
            else:
                line.p_value = mann_whitney_u(xb, xa).p_value
                beyond = line.p_value < ALPHA
                line.verdict = "beyond noise" if beyond else "within noise"
                line.reason = f"p = {line.p_value:.3g}"  # the page names the test once
        out.lines.append(line)
    return out
