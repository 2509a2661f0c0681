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

from django.db import IntegrityError, transaction
from django.db.models import Max, Min

from collectors.bench_gate import mann_whitney_u, smallest_p
from greenops import windows
from greenops.advisor.models import VariantPair
from greenops.errors import invalid
from greenops.kpis import metrics, queries
from greenops.kpis.models import Period
from greenops.teams.models import Team
from greenops.telemetry.models import GpuHour
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
    # The enforced power limits (W) each side's GPUs reported: (lowest, highest) or None when
    # the GPUs did not report one. Two pairs that differ make the comparison a power-cap
    # trade-off, measured.
    power_limits: tuple[tuple[float, float] | None, tuple[float, float] | None] = (None, None)

    @property
    def power_caps_differ(self) -> bool:
        a, b = self.power_limits
        return a is not None and b is not None and a != b


def power_limits(side: Side) -> tuple[float, float] | None:
    """Lowest and highest enforced power limit the side's GPUs reported in its window (each
    GPU-hour keeps its lowest)."""
    got = GpuHour.objects.filter(
        gpu_id__in=side.workload.gpu_queryset().values("id"), bucket__gte=side.window.start,
        bucket__lt=side.window.end, power_limit_min_w__isnull=False,
    ).aggregate(lo=Min("power_limit_min_w"), hi=Max("power_limit_min_w"))
    return None if got["lo"] is None else (got["lo"], got["hi"])


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
                     requests=(ka.get("requests") or 0, kb.get("requests") or 0),
                     power_limits=(power_limits(a), power_limits(b)))
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


# ---- Marked pairs --------------------------------------------------------------------------

def pair_sides(pair: VariantPair, default: windows.Window) -> tuple[Side, Side]:
    """The pair's two sides: each over its own period, or over `default` when it has none."""
    def one(wl: Workload, start: dt.datetime | None, end: dt.datetime | None) -> Side:
        if start is None or end is None:
            return Side(wl, default)
        return Side(wl, hour_window(start, end))
    return (one(pair.a_workload, pair.a_start, pair.a_end),
            one(pair.b_workload, pair.b_start, pair.b_end))


def _period(data, side: str) -> tuple[dt.datetime | None, dt.datetime | None]:
    start_s = (data.get(f"{side}_start") or "").strip()
    end_s = (data.get(f"{side}_end") or "").strip()
    if not start_s and not end_s:
        return None, None
    if not start_s:
        raise invalid(f"{side}_start", "give both ends of the period, or neither")
    if not end_s:
        raise invalid(f"{side}_end", "give both ends of the period, or neither")
    start = windows.parse_time(start_s, f"{side}_start")
    end = windows.parse_time(end_s, f"{side}_end")
    if end <= start:
        raise invalid(f"{side}_end", "must be after the start")
    if end - start > windows.MAX_CUSTOM_SPAN:
        raise invalid(f"{side}_end", f"a period may span at most "
                                     f"{windows.MAX_CUSTOM_SPAN.days} days")
    # Stored as the whole hours that will be compared, so the list shows what is compared.
    w = hour_window(start, end)
    return w.start, w.end


def create_pair(team: Team, data, user=None) -> VariantPair:
    """Validate a submitted pair (a FieldError names the first bad field) and store it."""
    label = (data.get("label") or "").strip()
    if not label:
        raise invalid("label", "name the pair, e.g. 'fp16 vs int8'")
    if len(label) > 100:
        raise invalid("label", "at most 100 characters")
    note = (data.get("note") or "").strip()
    if len(note) > 2000:
        raise invalid("note", "at most 2,000 characters")
    sides = {}
    for side in ("a", "b"):
        wl = Workload.objects.filter(team=team, slug=(data.get(side) or "").strip()).first()
        if wl is None:
            raise invalid(side, "must be one of this team's workloads")
        sides[side] = (wl, *_period(data, side))
    if sides["a"] == sides["b"]:
        raise invalid("b", "B is the same workload over the same period as A: pick another "
                           "workload or give the two sides different periods")
    if VariantPair.objects.filter(team=team, label=label).exists():
        raise invalid("label", "this team already has a pair with that label")
    try:
        with transaction.atomic():
            return VariantPair.objects.create(
                team=team, label=label, note=note, created_by=user,
                a_workload=sides["a"][0], a_start=sides["a"][1], a_end=sides["a"][2],
                b_workload=sides["b"][0], b_start=sides["b"][1], b_end=sides["b"][2])
    except IntegrityError:  # a concurrent submit with the same label won the race
        raise invalid("label", "this team already has a pair with that label") from None

