"""Read side: KPIs for any range and time series, from KpiRollup rows only."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from greenops import windows
from greenops.kpis import metrics
from greenops.kpis.models import KpiRollup, Period
from greenops.teams.models import Team
from greenops.workloads.models import Workload

# Named ranges the KPI pages offer (greenops.windows owns them) and the rollup period that
# serves each; each compares with the period of equal length before it.
PERIOD: dict[str, str] = {
    # KPIs roll up hourly: "hour" is the current clock hour so far (the page says so), so
    # every team page offers the same five ranges.
    "hour": Period.HOUR,
    "day": Period.HOUR,
    "week": Period.HOUR,
    "month": Period.DAY,
    "quarter": Period.DAY,
}
RANGES = windows.ranges(*PERIOD)
STEP = {Period.HOUR: windows.HOUR, Period.DAY: windows.DAY}


def window(range_key: str, now: dt.datetime | None = None) -> windows.Window:
    """Ending at the end of the current hour (or UTC day, for day resolution)."""
    return windows.named(range_key, now, STEP[PERIOD[range_key]])


def window_kpis(team: Team, workload: Workload | None, window: windows.Window) -> dict:
    """KPIs for any window, widened to the rollups' buckets (and saying so)."""
    period = Period.DAY if window.span > dt.timedelta(days=31) else Period.HOUR
    wide = window.widened(STEP[period])
    return {"period": period, "requested": {"start": window.start.isoformat(),
                                            "end": window.end.isoformat()},
            "start": wide.start.isoformat(), "end": wide.end.isoformat(),
            "current": kpis(team, workload, wide.start, wide.end, period)}


def rows(team: Team, workload: Workload | None, period: str, start: dt.datetime,
         end: dt.datetime):
    qs = KpiRollup.objects.filter(team=team, period=period, bucket__gte=start, bucket__lt=end)
    return qs.filter(workload=workload) if workload else qs.filter(workload__isnull=True)


def rows_by_day(team: Team, workload: Workload | None, start: dt.datetime,
                end: dt.datetime) -> list[KpiRollup]:
    """The rows that cover the hour-aligned [start, end): each whole UTC day in it from its day
    row (rollup.rollup_day: the exact merge of its hours), the rest -- the hours before the
    first whole day and after the last, and any day whose day row is not written yet -- from
    hour rows. A month to date late in the month is ~30 day rows and a day's hours instead of
    up to 744 hour rows, each a model object to build on every team-home view."""
    first, last = windows.ceil(start, windows.DAY), windows.floor_day(end)
    if first >= last:
        return list(rows(team, workload, Period.HOUR, start, end))
    days = list(rows(team, workload, Period.DAY, first, last))
    hours = Q(bucket__lt=first) | Q(bucket__gte=last)
    have = {r.bucket for r in days}
    day = first
    while day < last:
        if day not in have:
            hours |= Q(bucket__gte=day, bucket__lt=day + windows.DAY)
        day += windows.DAY
    return days + list(rows(team, workload, Period.HOUR, start, end).filter(hours))


def kpis(team: Team, workload: Workload | None, start: dt.datetime, end: dt.datetime,
         period: str = Period.HOUR, rollups: list[KpiRollup] | None = None) -> dict:
    """Every KPI for a team (workload None) or a workload over [start, end); `rollups`: its
    rows when the caller read them already."""
    if rollups is None:
        rollups = list(rows(team, workload, period, start, end))
    totals = metrics.merge(rollups)
    # Rates divide by the seconds measured (in the rows); the period only says "of how long".
    return metrics.derive(totals, (end - start).total_seconds())


# The previous period must have data in at least this share of the current period's buckets.
COMPARABLE_COVERAGE = 0.8

CARD_KEYS = ("energy_kwh", "facility_energy_kwh", "co2e_kg", "cost_usd", "gpu_util_pct",
             "requests", "throughput_per_s", "energy_per_inference_j",
             "co2e_per_1k_inferences_g", "energy_per_token_j", "latency_p50_ms",
             "latency_p99_ms")


def overview(team: Team, workload: Workload | None, range_key: str,
             now: dt.datetime | None = None) -> dict:
    """Current-period KPIs and their change against the previous period of equal length."""
    period = PERIOD[range_key]
    w = window(range_key, now)
    start, end, span = w.start, w.end, w.span
    # Each period's rows read once: the KPIs, the bucket counts and the freshness below all
    # come from them (one query each instead of five in all).
    now_rows = list(rows(team, workload, period, start, end))
    before_rows = list(rows(team, workload, period, start - span, start))
    current = kpis(team, workload, start, end, period, now_rows)
    previous = kpis(team, workload, start - span, start, period, before_rows)
    # A change against a period that was only partly measured (the fleet joined half-way
    # through it) is a measurement artefact, not a trend: compare only like with like.
    buckets_now, buckets_before = len(now_rows), len(before_rows)
    # The newest bucket is the current, still filling one: rollup.run rewrites it every beat
    # tick (settings CELERY_BEAT_SCHEDULE "kpi-rollups"), so the page says how fresh it is.
    as_of = max((r.computed_at for r in now_rows), default=None)
    # The current clock hour alone is still filling: against the whole hour before it any
    # change would be the clock, not a trend.
    clock_hour = w.span <= STEP[period]
    comparable = (not clock_hour and buckets_now > 0
                  and buckets_before >= COMPARABLE_COVERAGE * buckets_now)
    changes = {k: metrics.change_pct(current.get(k), previous.get(k)) if comparable else None
               for k in CARD_KEYS}
    return {"range": range_key, "label": w.label, "period": period, "start": start.isoformat(),
            "end": end.isoformat(), "current": current, "previous": previous,
            "change_pct": changes, "comparable": comparable, "clock_hour": clock_hour,
            "as_of": as_of.astimezone(dt.UTC).isoformat() if as_of else None,
            "previous_partial": 0 < buckets_before < COMPARABLE_COVERAGE * buckets_now}


def series(team: Team, workload: Workload | None, range_key: str,
           now: dt.datetime | None = None) -> dict:
    """Per-bucket KPIs for charts."""
    period = PERIOD[range_key]
    w = window(range_key, now)
    start, end = w.start, w.end
    step = 3600 if period == Period.HOUR else 86400
    out: dict[str, list] = {k: [] for k in (
        "t", "requests", "energy_kwh", "energy_per_inference_j", "throughput_per_s",
        "latency_p99_ms", "latency_p50_ms", "co2e_kg")}
    simulated = False
    for r in rows(team, workload, period, start, end).order_by("bucket"):
        k = metrics.derive(metrics.merge([r]), step)
        out["t"].append(r.bucket.isoformat())
        for key in list(out)[1:]:
            out[key].append(k[key])
        simulated = simulated or r.simulated
    return {"period": period, "simulated": simulated, **out}


def workload_table(team: Team, range_key: str, now: dt.datetime | None = None) -> list[dict]:
    period = PERIOD[range_key]
    w = window(range_key, now)
    start, end = w.start, w.end
    by_id: dict[int, list] = {}
    for r in KpiRollup.objects.filter(team=team, period=period, bucket__gte=start,
                                      bucket__lt=end, workload__isnull=False):
        by_id.setdefault(r.workload_id, []).append(r)
    out = []
    for w in Workload.objects.filter(team=team):
        k = metrics.derive(metrics.merge(by_id.get(w.id, [])), (end - start).total_seconds())
        out.append({"workload": w, **k})
    return out
